"""The sm90 checks a developer runs on a Hopper GPU (cusyncgen.commands.sm90_check, cusyncgen.commands.sanitize),
each on a small part of its sweep: every ordering and policy of one tile config and one tile pair
checked and stressed (alternating inputs, back-to-back launches, graph replays); the sanitizer's
variants launched as they run under memcheck/synccheck and with their waits presatisfied (racecheck);
and memcheck itself on the RowSync ones where compute-sanitizer is installed. The whole sweeps:
`bash benchmarks/gpu.sh checks` and `bash benchmarks/gpu.sh sanitize`."""

import shutil

import pytest

from support import sm90_gpu

_gpu, _why = sm90_gpu()

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _gpu, reason=_why or "GPU available")]


def test_checks_and_stress_of_one_tile_config_and_pair(tmp_path):
    from cusyncgen.commands import sm90_check

    argv = ["--models", "gpt3", "--M", "200", "--configs", "128x128x64", "--pairs", "64x128x64+128x128x64",
            "--banded1", "off,g1", "--stress-M", "128", "--stress-alternating", "20", "--stress-launches", "50",
            "--stress-replays", "5", "-o", str(tmp_path)]
    assert sm90_check.main(argv) == 0
    [log] = tmp_path.glob("sm90-checks-*.log")
    lines = log.read_text().splitlines()
    assert lines[0].startswith("# python -m cusyncgen.commands.sm90_check --models gpt3 --M 200")
    checks = [line for line in lines if line.startswith("check ")]
    stress = [line for line in lines if line.startswith("stress ")]
    assert checks and stress and all(line.endswith(" ok") for line in checks)
    assert all(" ok (" in line for line in stress)
    assert any("64x128x64+128x128x64 pdl+policy TileSync" in line for line in stress)
    assert lines[-1].startswith("0 failure(s)")


@pytest.mark.parametrize("mode", ["run", "presatisfied"])
def test_the_sanitizer_target_runs_every_variant(mode, capsys):
    from cusyncgen.commands import sm90_check

    assert sm90_check.main(["--sanitizer-target", mode]) == 0
    out = capsys.readouterr().out
    from cusyncgen.cuda import decode, decode_attention, sm90
    from cusyncgen.workloads import attention_sm90 as W

    from cusyncgen.workloads import mlp_swap as S

    variants = [line for line in out.splitlines() if line.startswith("variant ")]
    attention = [line for line in variants if line.startswith("variant attention ")]
    decoded = [line for line in variants if "weights): " in line]
    swapped = [line for line in variants if "/swap (" in line]
    split = [line for line in variants if line.startswith("variant swap split ")]   # each K split, a small weight
    assert len(split) == sum(sm90.swap_tile(c).KS > 1 for c in sm90.SWAP_CONFIGS) > 0
    assert (len(variants) - len(attention) - len(decoded) - len(swapped) - len(split)
            == len(sm90_check.sanitizer_variants("gpt3")))
    assert len(swapped) == sum(len(S.MLPSwap(m, M, c).configs()) for m, M in sm90_check.SWAP_SANITIZER_CASES
                               for c, c2 in S.tile_pairs(M, model=m) if c == c2)
    assert any("gpt3 M=64 PDL/swap (64x96x64xa)" in line for line in swapped)   # the wide form
    assert len(decoded) == len(sm90_check.DECODE_SANITIZER_CASES) * len(decode.ORDERINGS)
    gen = sum(len(W.AttentionGen(m, B, p).configs()) for m, B, p in sm90_check.ATTENTION_SANITIZER_CASES)
    forms = [line for line in attention if line.startswith("variant attention form ")]   # the kernel alone, each form
    assert [line.split()[3] for line in forms] == list(decode_attention.FORMS)
    assert len(attention) == gen + len(forms) + sum(len(W.AttentionPrompt(*c).configs())
                                                    for c in sm90_check.PROMPT_SANITIZER_CASES)
    assert all(line.split(": ", 1)[1].startswith(("ok", "ran")) for line in variants)


@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer is not on PATH")
def test_memcheck_on_the_rowsync_variants(tmp_path):
    from cusyncgen.commands import sanitize

    assert sanitize.main(["--tools", "memcheck", "--only", "RowSync", "-o", str(tmp_path)]) == 0
    [log] = tmp_path.glob("sanitize-*.log")
    line = log.read_text().splitlines()[2]
    assert line.startswith("memcheck") and "ERROR SUMMARY: 0 errors" in line and " 0 failed" in line
