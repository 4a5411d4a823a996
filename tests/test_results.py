"""docs/results.md is generated from benchmarks/results/<device>/*.json (cusyncgen/results.py): the
committed page is current, its numbers are the JSON's, missing devices/workloads and sm90 rows are
handled, and the README and docs link only to files that exist. benchmarks/results/ holds one folder
per device, and every result in it names the command that produced it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from cusyncgen import results

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
H100, H200 = RESULTS / "nvidia-h100-80gb-hbm3", RESULTS / "nvidia-h200"
PAGE = ROOT / "docs" / "results.md"


def section(text: str, heading: str) -> str:
    """The lines under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    lines = text.splitlines()
    start = lines.index(heading)
    out = []
    for line in lines[start + 1:]:
        if line.startswith("#") and len(line.split(" ")[0]) <= len(level):
            break
        out.append(line)
    return "\n".join(out)


def test_committed_page_is_regenerated():
    text = results.render(RESULTS, PAGE.parent)
    assert PAGE.read_text() == text, (
        "docs/results.md differs from the JSON; run `python -m cusyncgen.results -o docs/results.md "
        "benchmarks/results` instead of editing it by hand")


def test_check_flag(tmp_path, capsys):
    out = tmp_path / "docs" / "results.md"
    assert results.main(["-o", str(out), "--check", str(RESULTS)]) == 1
    assert "regenerate" in capsys.readouterr().err
    assert results.main(["-o", str(out), str(RESULTS)]) == 0
    assert results.main(["-o", str(out), "--check", str(RESULTS)]) == 0
    out.write_text(out.read_text().replace("1.0", "1.1", 1))
    assert results.main(["-o", str(out), "--check", str(RESULTS)]) == 1


def _default_runs():
    for path in sorted(RESULTS.rglob("*.json")):
        data = json.loads(path.read_text())
        if path.stem.startswith("tune-") or "rows" not in data:
            continue
        if path.stem != f"{data['workload']}-{results.slug(data['device'])}":
            continue
        yield data


@pytest.mark.parametrize("data", list(_default_runs()), ids=lambda d: f"{d['workload']}-{d['device']}")
def test_point_rows_are_the_json(data):
    """Every point's StreamSync time, best synchronized configuration (recomputed here from the
    rows), its time and speed-up, and the vendor's graph time appear in that point's table row."""
    page = PAGE.read_text()
    title = results.TITLES[data["workload"]]
    run = section(page, f"### {title} on {data['device']}")
    if data["workload"] == "overhead":
        for r in data["rows"]:
            assert f"| {r['config']} | {r['time_us']:.1f} |" in run
        return
    vendor = data.get("vendor", "cuBLAS")
    excluded = {"StreamSync", "PDL", "floor", vendor, vendor + "+graph"}
    points = {}
    for r in data["rows"]:
        if "/" not in r["config"]:
            points.setdefault((r["model"], r["M"]), []).append(r)
    checked = 0
    for (model, M), rows in points.items():
        table = section(run, f"#### {model} (sm80 kernels)")
        by = {r["config"]: r for r in rows}
        sync = [r for r in rows if r["config"] not in excluded and r.get("correct", True)]
        best = min(sync, key=lambda r: (r["time_us"], r["config"]))  # ties by name, as results.py
        line = next(line for line in table.splitlines() if line.startswith(f"| {M} | "))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == f"{by['StreamSync']['time_us']:.1f}"
        assert cells[2] == f"{by['PDL']['speedup_vs_streamsync']:.3f}x"
        assert cells[3] == best["config"] and cells[4] == f"{best['time_us']:.1f}"
        assert cells[5] == f"{best['speedup_vs_streamsync']:.3f}x"
        assert cells[6] == f"{by[vendor + '+graph']['time_us']:.1f}"
        if "floor" in by:
            assert cells[-2] == f"{by['floor']['time_us']:.1f}"
        checked += 1
    assert checked == len(points) > 0


def test_summary_is_the_json():
    """The MLP summary line of GPT-3 on the H200: the best speed-up over the sizes, where, and at
    how many sizes the synchronized chain and cuBLAS+graph are faster, recomputed from the rows."""
    data = json.loads((H200 / "mlp-nvidia-h200.json").read_text())
    rows = [r for r in data["rows"] if r["model"] == "gpt3"]
    best = {}
    for r in rows:
        if r["config"] not in ("StreamSync", "PDL", "floor", "cuBLAS", "cuBLAS+graph") and r["correct"]:
            if r["M"] not in best or r["time_us"] < best[r["M"]]["time_us"]:
                best[r["M"]] = r
    top = max(best.values(), key=lambda r: r["speedup_vs_streamsync"])
    faster = sum(r["speedup_vs_streamsync"] > 1 for r in best.values())
    ours = {}
    for r in rows:
        if r["config"] not in ("floor", "cuBLAS", "cuBLAS+graph"):
            ours[r["M"]] = min(ours.get(r["M"], float("inf")), r["time_us"])
    cublas = sum(r["time_us"] < ours[r["M"]] for r in rows if r["config"] == "cuBLAS+graph")
    forms = results.forms_label(r.get("vendor_form", "unnamed") for r in rows if r["config"] == "cuBLAS+graph")
    line = next(line for line in section(PAGE.read_text(), "### MLP").splitlines()
                if line.startswith("| gpt3 | NVIDIA H200 |"))
    assert f"{top['speedup_vs_streamsync']:.3f}x (M={top['M']}, {top['config']})" in line
    assert f"| {faster} of {len(best)} | {cublas} of {len(best)} (cuBLAS: {forms}) |" in line


def test_sm90_vendor_summary_is_the_json():
    """The sm90 MLP's line against the vendor library, recomputed from its rows: per M the fastest
    correct synchronized row over every tile config and chain (split-K included) against
    cuBLAS+graph and against the fastest StreamSync/PDL row; the best M, the geometric mean over M >=
    128, the floor ratio; and several rows per configuration name (one per tile config) become the
    fastest correct one in the per-run table."""
    import math
    data = json.loads((H100 / "mlp-nvidia-h100-80gb-hbm3-sm90.json").read_text())
    page = PAGE.read_text()
    for model in ("gpt3", "llama-ep"):
        rows = [r for r in data["rows"] if r["model"] == model]
        sync, stream, cub, floor, form = {}, {}, {}, {}, {}
        for r in rows:
            base = r["config"].split("/")[0]
            if base == "cuBLAS+graph":
                cub[r["M"]] = r["time_us"]
                form[r["M"]] = r.get("vendor_form", "unnamed")
            elif base == "floor":
                floor[r["M"]] = r["time_us"]
            elif base != "cuBLAS" and r["correct"]:
                d = stream if base in ("StreamSync", "PDL") else sync
                if r["M"] not in d or r["time_us"] < d[r["M"]]["time_us"]:
                    d[r["M"]] = r
        vs = {M: cub[M] / r["time_us"] for M, r in sync.items()}
        top = max(vs, key=lambda M: (vs[M], -M))
        geo = math.exp(sum(math.log(v) for M, v in vs.items() if M >= 128) / sum(M >= 128 for M in vs))
        fl = math.exp(sum(math.log(floor[M] / r["time_us"]) for M, r in sync.items()) / len(sync))
        line = next(line for line in section(page, "### MLP").splitlines()
                    if line.startswith(f"| {model} | NVIDIA H100 80GB HBM3 |") and "sizes faster" in line)
        assert f"| {vs[top]:.3f}x (M={top}, {sync[top]['config']}; {sum(v > 1 for v in vs.values())} of {len(vs)} " \
               "sizes faster)" in line
        assert f"| {geo:.3f}x |" in line
        assert line.endswith(f"| {fl:.3f}x | {results.forms_label(form[M] for M in sorted(vs))} |")
        assert max(stream[M]["time_us"] / r["time_us"] for M, r in sync.items()) == pytest.approx(
            float(line.split("|")[5].split("x")[0]), abs=6e-4)
        # the per-run table: StreamSync at M = 1 is the fastest correct StreamSync row of all tile configs
        ss = min(r["time_us"] for r in rows if r["M"] == 1 and r["config"] == "StreamSync" and r["correct"])
        table = section(section(page, "### MLP on NVIDIA H100 80GB HBM3 (sm90 kernels)"), f"#### {model} (sm90 kernels)")
        assert any(line.startswith(f"| 1 | {ss:.1f} |") for line in table.splitlines())


def test_missing_workloads_and_devices(tmp_path):
    shutil.copy(H200 / "mlp-nvidia-h200.json", tmp_path)
    data = json.loads((H200 / "overhead-nvidia-h200.json").read_text())
    (tmp_path / "overhead-nvidia-h200.json").write_text(json.dumps(data))
    # a point without StreamSync or a vendor row still renders, with '-'
    mlp = json.loads((H200 / "mlp-nvidia-h200.json").read_text())
    dropped = ("StreamSync", "cuBLAS+graph")
    mlp["rows"] = [r for r in mlp["rows"]
                   if not (r["model"] == "gpt3" and r["M"] == 1 and r["config"] in dropped)]
    (tmp_path / "mlp-nvidia-h200.json").write_text(json.dumps(mlp))
    page = results.render(tmp_path, tmp_path)
    assert section(page, "## Conv2D").strip() == "No results."
    assert section(page, "## Attention").strip() == "No results."
    assert section(section(page, "## Summary"), "### Conv2D").strip() == "No results."
    assert "H100" not in page and "../" not in page
    gpt3 = section(section(page, "### MLP on NVIDIA H200"), "#### gpt3 (sm80 kernels)")
    assert any(line.startswith("| 1 | - |") for line in gpt3.splitlines())
    assert "(mlp-nvidia-h200.json)" in page  # links relative to the output folder


def test_kernel_field_groups_rows(tmp_path):
    """Rows with "kernel": "sm90" get their own tables and summary lines; no field means sm80."""
    data = json.loads((H200 / "mlp-nvidia-h200.json").read_text())
    ours = [r for r in data["rows"] if r["config"] not in ("cuBLAS", "cuBLAS+graph", "floor")]
    sm90 = [dict(r, kernel="sm90", time_us=r["time_us"] / 2) for r in ours if r["model"] == "gpt3"]
    data["rows"] += sm90
    (tmp_path / "mlp-nvidia-h200.json").write_text(json.dumps(data))
    page = results.render(tmp_path, tmp_path)
    run = section(page, "### MLP on NVIDIA H200")
    assert "#### gpt3 (sm80 kernels)" in run and "#### gpt3 (sm90 kernels)" in run
    assert "#### llama (sm90 kernels)" not in run
    summary = section(page, "## Summary")
    assert "| gpt3 | NVIDIA H200 |" in summary and "| gpt3 (sm90) | NVIDIA H200 |" in summary
    # the sm90 rows are twice as fast, so cuBLAS+graph is compared with them in their own table
    sm90_table = section(run, "#### gpt3 (sm90 kernels)")
    sm80_table = section(run, "#### gpt3 (sm80 kernels)")
    assert sm90_table != sm80_table


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "mlp-nvidia-h200.json").write_text("{not json")
    assert results.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "mlp-nvidia-h200.json" in err and "Traceback" not in err
    no_config = {"workload": "mlp", "device": "X", "rows": [{"M": 1}]}
    (tmp_path / "mlp-nvidia-h200.json").write_text(json.dumps(no_config))
    assert results.main([str(tmp_path)]) == 1
    assert "rows[0] has no config, time_us" in capsys.readouterr().err
    bad = {"workload": "mlp", "device": "X", "rows": [{"config": "StreamSync", "time_us": "fast"}]}
    (tmp_path / "mlp-nvidia-h200.json").write_text(json.dumps(bad))
    assert results.main([str(tmp_path)]) == 1
    assert "time_us is 'fast', not a number" in capsys.readouterr().err
    assert results.main([str(tmp_path / "nowhere")]) == 1
    assert "no such directory" in capsys.readouterr().err


def test_result_files_name_workload_device_variant():
    """No result file carries a round of work in its name; every bench/tune JSON is named
    <workload>-<device>[-<variant>] after the device it records, in the folder of that device."""
    for path in RESULTS.rglob("*"):
        assert not re.search(r"session|round", path.name), path.name
    for path in RESULTS.rglob("*.json"):
        data = json.loads(path.read_text())
        if "workload" in data:
            prefix = f"{data['workload']}-{results.slug(data['device'])}"
            if path.stem.startswith("tune-"):
                prefix = "tune-" + prefix
            assert path.stem == prefix or path.stem.startswith(prefix + "-"), path.name
            assert path.parent.name == results.slug(data["device"]), path


def test_runs_in_device_folders_are_read(tmp_path):
    """The results folder is read with its folders; links name the file's folder."""
    (tmp_path / "nvidia-h200").mkdir()
    shutil.copy(H200 / "mlp-nvidia-h200.json", tmp_path / "nvidia-h200")
    page = results.render(tmp_path, tmp_path)
    assert "| gpt3 | NVIDIA H200 |" in section(page, "## Summary")
    assert "(nvidia-h200/mlp-nvidia-h200.json)" in page


def test_every_result_names_the_command_that_produced_it():
    """benchmarks/results/ holds one folder per device (and the compiler's scale benchmark, which
    runs on no GPU); each result in them names its command: a JSON in its "command" (a tune cache,
    whose format has no room for it, in benchmarks/README.md), a markdown page in a 'Written by' line
    under its title, a log in its first line, a plot through the JSON beside it."""
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    top = sorted(p.name for p in RESULTS.iterdir() if p.is_file())
    assert top == ["compiler-scale.json", "compiler-scale.md"], top
    assert "benchmarks/compiler_scale.py" in " ".join((RESULTS / "compiler-scale.md").read_text().splitlines()[:4])
    folders = [p for p in RESULTS.iterdir() if p.is_dir()]
    assert {p.name for p in folders} >= {"nvidia-h100-80gb-hbm3", "nvidia-h200"}
    for path in sorted(p for folder in folders for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(RESULTS).as_posix()
        if path.suffix == ".json":
            data = json.loads(path.read_text())
            if path.stem.startswith("tune-cache-"):
                line = next((line for line in readme.splitlines() if path.name in line), "")
                assert "`cusyncgen tune" in line, f"benchmarks/README.md does not say which command wrote {name}"
            else:
                assert str(data.get("command", "")).startswith(("cusyncgen ", "python ")), f"{name} has no command"
        elif path.suffix == ".md":
            head = path.read_text().splitlines()[:4]
            assert any(line.startswith("Written by `") for line in head), f"{name} names no command under its title"
        elif path.suffix == ".log":
            first = path.read_text().splitlines()[0]
            assert first.startswith("# ") and re.search(r"\b(bash|python3?|cusyncgen)\b", first), \
                f"{name}: its first line names no command"
        elif path.suffix == ".png":
            assert "command" in json.loads(path.with_suffix(".json").read_text()), name
        else:
            raise AssertionError(f"{name}: not a result (a generated header or a scratch file?)")


DOCS = ["README.md", "docs/design.md", "docs/results.md", "docs/sm90.md", "benchmarks/README.md",
        "tests/cuda_src/README.md"]


@pytest.mark.parametrize("doc", DOCS)
def test_doc_links_resolve(doc):
    """Every relative markdown link and every benchmarks/results/ path named in the docs exists."""
    path = ROOT / doc
    text = path.read_text()
    for target in re.findall(r"\]\(([^)#\s]+)\)", text):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{doc} links to missing {target}"
    # (a path after '<commit>:' is one of `git show <commit>:<path>`, from the history)
    for name in re.findall(r"(?<!:)benchmarks/results/([\w.+/-]+\.\w+)", text):
        assert (RESULTS / name).exists(), f"{doc} names missing benchmarks/results/{name}"


def test_readme_summary_rows_are_generated():
    """The README's result tables are copies of docs/results.md's summary rows."""
    readme = (ROOT / "README.md").read_text()
    summary = section(PAGE.read_text(), "## Summary")
    rows = [line for line in readme.splitlines() if line.startswith("| ") and " NVIDIA " in line]
    assert rows, "the README has no result table"
    for line in rows:
        assert line in summary, f"README row not in docs/results.md's summary: {line}"


def test_the_vendor_rows_form_is_shown_and_an_old_run_says_unnamed(tmp_path):
    """Each point's table names the form of its fastest vendor + graph row, the summaries count the
    forms over the points; a run from before the forms were compared renders, its forms 'unnamed'."""
    data = json.loads((H100 / "mlp-nvidia-h100-80gb-hbm3-sm90.json").read_text())
    for r in data["rows"]:   # a run from before the forms were compared
        r.pop("vendor_form", None)
        r.pop("vendor_forms", None)
    forms = {}
    for r in data["rows"]:
        if r["model"] == "gpt3" and r["config"] == "cuBLAS+graph":
            r["vendor_form"] = forms[r["M"]] = "cublaslt-gelu" if r["M"] in (64, 2048) else "torch-unfused"
            r["vendor_forms"] = {"cublaslt-gelu": r["time_us"], "torch-unfused": r["time_us"] + 1.0}
    (tmp_path / "mlp-nvidia-h100-80gb-hbm3-sm90.json").write_text(json.dumps(data))
    page = results.render(tmp_path, tmp_path)
    table = section(section(page, "### MLP on NVIDIA H100 80GB HBM3 (sm90 kernels)"), "#### gpt3 (sm90 kernels)")
    head = next(line for line in table.splitlines() if line.startswith("| M |"))
    col = [c.strip() for c in head.strip("|").split("|")].index("vendor form")
    for line in table.splitlines():
        if re.match(r"\| \d+ \|", line):
            M = int(line.split("|")[1])
            assert line.strip("|").split("|")[col].strip() == forms[M], line
    summary = section(page, "## Summary")
    n = len(forms)
    assert f"(cuBLAS: torch-unfused {n - 2}, cublaslt-gelu 2) |" in next(
        line for line in summary.splitlines() if line.startswith("| gpt3 (sm90) |"))
    vendor_line = next(line for line in summary.splitlines() if line.startswith("| gpt3 |") and "sizes faster" in line)
    assert vendor_line.endswith(f"| torch-unfused {n - 2}, cublaslt-gelu 2 |")
    llama = next(line for line in summary.splitlines() if line.startswith("| llama-ep |") and "sizes faster" in line)
    assert llama.endswith("| unnamed |")   # no vendor_form in its rows
    assert results.forms_label(["a", "a"]) == "a" and results.form_of({"config": "cuBLAS+graph"}) == "unnamed"


def test_a_tune_run_names_the_vendors_form_of_its_re_measurement(tmp_path):
    data = json.loads((H100 / "tune-mlp-nvidia-h100-80gb-hbm3-sm90.json").read_text())
    for c in data["choices"]:
        if c["model"] == "gpt3" and c.get("confirm"):
            c["confirm"]["vendor_form"] = "cublaslt-gelu"
        if c["model"] == "llama-ep" and c.get("confirm"):   # as a run from before the forms were named
            c["confirm"].pop("vendor_form", None)
    (tmp_path / "tune-mlp-nvidia-h100-80gb-hbm3-sm90.json").write_text(json.dumps(data))
    page = results.render(tmp_path, tmp_path)
    lines = section(page, "### tune mlp on NVIDIA H100 80GB HBM3 (sm90 kernels)").splitlines()
    assert next(line for line in lines if line.startswith("| gpt3 |") and "sizes |" in line).endswith("| cublaslt-gelu |")
    assert next(line for line in lines if line.startswith("| llama-ep |") and "sizes |" in line).endswith("| unnamed |")
