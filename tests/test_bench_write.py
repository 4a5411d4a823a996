"""bench.write: the JSON always; the markdown table (and plot) for every workload that compares with a
vendor library, whether or not its result names the vendor (Attention's does not)."""
import json

from cusyncgen.commands import bench


def _attention_like():
    rows = [{"model": "gpt3-prompt", "M": 512, "config": c, "time_us": t, "speedup_vs_streamsync": 100.0 / t,
             "correct": True, "kernel": "sm80"}
            for c, t in (("StreamSync", 100.0), ("PDL", 99.0), ("TileSync+PDL", 95.0), ("cuBLAS", 92.0),
                         ("cuBLAS+graph", 90.0), ("floor", 80.0))]
    return {"device": "test", "workload": "attention", "rows": rows}


def test_table_written_without_a_vendor_key(tmp_path):
    paths = bench.write(_attention_like(), tmp_path, "attention-test", table=True)
    names = {p.name for p in paths}
    assert "attention-test.json" in names and "attention-test.md" in names
    md = (tmp_path / "attention-test.md").read_text()
    assert "TileSync+PDL" in md
    assert json.loads((tmp_path / "attention-test.json").read_text())["workload"] == "attention"


def test_no_table_for_a_workload_without_a_vendor(tmp_path):
    res = {"device": "test", "workload": "overhead",
           "rows": [{"config": "StreamSync", "time_us": 1.0, "overhead_vs_streamsync": 0.0, "correct": True}]}
    paths = bench.write(res, tmp_path, "overhead-test", table=False)
    assert [p.name for p in paths] == ["overhead-test.json"]


def test_the_markdown_names_the_vendors_form():
    res = _attention_like()
    for r in res["rows"]:
        if r["config"].startswith("cuBLAS"):
            r["vendor_form"] = "torch-unfused"
    assert "| 92.0 (torch-unfused) | 90.0 (torch-unfused) | 80.0 | yes |" in bench.markdown(res)
    assert "| 92.0 | 90.0 | 80.0 | yes |" in bench.markdown(_attention_like())   # a run without forms


def test_the_markdown_names_the_command_of_the_json():
    res = dict(_attention_like(), command=bench.command_line("cusyncgen bench", ["attention", "-o", "out dir"]))
    assert res["command"] == "cusyncgen bench attention -o 'out dir'"
    lines = bench.markdown(res).splitlines()
    assert lines[2] == "Written by `cusyncgen bench attention -o 'out dir'`."
    assert "Written by" not in bench.markdown(_attention_like())


def test_the_decode_table_has_the_swapped_gemm():
    rows = [{"model": "gpt3", "M": 16, "config": c, "time_us": t, "correct": True, "kernel": "sm90", "tiles": tiles,
             "speedup_vs_streamsync": 118.0 / t}
            for c, t, tiles in (("StreamSync", 130.0, "64x128x64"), ("PDL", 125.0, "64x128x64"),
                                ("StreamSync/decode", 118.0, "decode"), ("PDL/decode", 114.0, "decode"),
                                ("TileSync+Chain/decode", 116.0, "decode"),
                                ("PDL/swap", 113.0, "swap 32x64x64sw2"), ("PDL/swap", 112.5, "swap 16x64x128sw2"),
                                ("cuBLAS", 117.0, None), ("cuBLAS+graph", 114.0, None), ("floor", 102.0, None))]
    md = bench.markdown({"device": "test", "workload": "mlp", "kernel": "sm90", "vendor": "cuBLAS", "rows": rows})
    assert ("| gpt3 | 16 | 118.0 | 114.0 | TileSync+Chain/decode | 116.0 | 112.5 (16x64x128sw2) | PDL/swap | 112.5 | "
            "114.0 | 1.013x | 1.103x |") in md
