"""Configuration names (StreamSync, PDL, <Policy>[+PDL][+WRT]) parse back to what printed them."""
import pytest

from cusyncgen.cuda.configs import PDL_ALONE, STREAM_SYNC, Config


def all_configs():
    out = [STREAM_SYNC, PDL_ALONE]
    for policy in ("TileSync", "RowSync", "StridedSync"):
        for reorder in (False, True):
            for custom_order in (False, True):
                out += [Config(policy, "waitkernel", custom_order, reorder), Config(policy, "pdl", custom_order, reorder)]
            out.append(Config(policy, "none", False, reorder))
    return out


@pytest.mark.parametrize("cfg", all_configs(), ids=lambda c: c.name)
def test_parse_inverts_name(cfg):
    assert Config.parse(cfg.name) == cfg


@pytest.mark.parametrize("name", ["StridedSync+RowSync+TileSync+PDL+RT", "TileSync+RowSync+TileSync",
                                  "TileSync+GroupSync_xtile_ytile_zall+WRT", "Conv2DTileSync+PDL"])
def test_combined_policies_parse(name):
    """Attention names one policy per dependency, joined by '+', before the options."""
    cfg = Config.parse(name)
    assert cfg.name == name and "+PDL" not in cfg.policy and cfg.policy.split("+")[-1].endswith(("Sync", "zall"))


@pytest.mark.parametrize("bad", ["RowSync+X", "RowSync+TR", "RowSync+W", "RowSync+PDL+W", "RowSync+", "RowSync+R+T",
                                 "RowSync+PDL+TileSync", "+RowSync", "PDL+RowSync", "StreamSync+R",
                                 "PDL+T"])
def test_bad_names_are_refused(bad):
    with pytest.raises(ValueError, match="not a configuration name"):
        Config.parse(bad)
