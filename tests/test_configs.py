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


@pytest.mark.parametrize("bad", ["RowSync+X", "RowSync+TR", "RowSync+W", "RowSync+PDL+W", "RowSync+", "RowSync+R+T"])
def test_bad_names_are_refused(bad):
    with pytest.raises(ValueError, match="not a configuration name"):
        Config.parse(bad)
