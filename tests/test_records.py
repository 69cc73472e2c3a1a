"""Run records (``results/``): the record command, published weights, chapters
reading records instead of training, the Results page and the cited figures.

Tiny runs are recorded into temporary folders; the committed records are checked
as they are: scored again from their weights, free of pickles, cited correctly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch
import yaml
from safetensors import safe_open

from annotated_transformer import cli, records, runner
from annotated_transformer.book import results as page
from annotated_transformer.machine import cpu_model, short_cpu
from annotated_transformer.models.encoder_decoder import count_parameters
from annotated_transformer.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
PUBLISHED = [f for f, r in records.all_records(RESULTS) if r.get("weights")]
CLASSIFY = [  # a run of seconds
    "train_subset=600",
    "val_size=100",
    "test_subset=100",
    "steps=12",
    "eval_every=6",
    "warmup=2",
]
TRANSLATE = ["train_limit=300", "eval_limit=20", "warmup=2", "tie=true"]
PLAIN = {".json", ".csv", ".log", ".md", ".safetensors"}
MIRRORS = {  # the data mirror each task reads
    "classify": "imdb",
    "mlm": "imdb",
    "translate": "multi30k",
    "lm": "chars",
}


def command(*argv: str | Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def train_classifier(out: Path, mirror: Path, **options) -> None:
    options = {"settings": CLASSIFY, "data_dir": mirror} | options
    runner.train("classify", out, preset="tiny", **options)


@pytest.fixture(scope="module")
def classify_run(tmp_path_factory, imdb_mirror, one_thread) -> Path:
    out = tmp_path_factory.mktemp("runs") / "cls"
    train_classifier(out, imdb_mirror)
    return out


def test_record_refuses_an_unfinished_run(tmp_path, imdb_mirror, one_thread):
    out, res = tmp_path / "stopped", tmp_path / "res"
    train_classifier(out, imdb_mirror, max_steps=3)
    assert (out / "last.pt").is_file() and not (out / "metrics.json").exists()
    code, _, err = command("record", out, "--name", "x", "--results", res)
    assert code == 1 and err.count("\n") == 1 and "not a finished run" in err
    assert not (res / "x").exists()
    (out / "metrics.json").write_text("{")  # a run that died writing its metrics
    (out / "final.pt").write_bytes(b"")
    code, _, err = command("record", out, "--name", "x", "--results", res)
    assert code == 1 and err.count("\n") == 1 and "not valid JSON" in err


def test_record_publishes_weights_that_predict_as_the_run(classify_run, tmp_path):
    res = tmp_path / "res"
    argv = ("record", classify_run, "--name", "cls-tiny", "--results", res)
    code, _, err = command(*argv, "--weights")
    assert code == 0, err
    folder = res / "cls-tiny"
    assert sorted(p.name for p in folder.iterdir()) == [
        "history.csv",
        "model.safetensors",
        "record.json",
        "state.json",
        "train.log",
    ]
    record = records.read_record(folder)
    metrics = json.loads((classify_run / "metrics.json").read_text())
    assert record["metrics"] == metrics
    assert record["config"] == metrics["config"]
    # Trained in Python, not at the command line: the command is rebuilt.
    assert record["command"].startswith("python -m annotated_transformer classify")
    assert all(f"--set {setting}" in record["command"] for setting in CLASSIFY)
    assert record["command"].endswith("--out runs/cls-tiny --threads 1")
    assert record["machine"]["threads"] == 1
    assert record["machine"]["torch"] == torch.__version__
    assert record["git"]["commit"]
    assert record["train_seconds"] == metrics["train_seconds"]
    weights = (folder / "model.safetensors").read_bytes()
    assert record["weights"]["sha256"] == hashlib.sha256(weights).hexdigest()

    # The published weights are the run's final.pt, tensor for tensor ...
    _, reference = runner.load_model(classify_run / "final.pt")
    _, published = records.load_model(folder)
    stored = published.state_dict()
    for name, tensor in reference.state_dict().items():
        assert torch.equal(tensor, stored[name]), name
    # ... and the command line predicts with them at once.
    reviews = ["A wonderful, moving film.", "Dull, and far too long."]
    final = classify_run / "final.pt"
    from_record = command("classify", "predict", "--checkpoint", folder, *reviews)
    from_run = command("classify", "predict", "--checkpoint", final, *reviews)
    assert from_record == from_run and from_run[0] == 0
    code, _, err = command(*argv)
    assert code == 1 and "exists" in err


def test_record_says_where_a_resumed_run_trained(tmp_path, imdb_mirror, one_thread):
    out = tmp_path / "moved"
    train_classifier(out, imdb_mirror, max_steps=6)
    runner.train("classify", out, resume=True, max_steps=9, echo=False)
    torch.set_num_threads(2)  # resumed elsewhere: another number of threads
    runner.train("classify", out, resume=True, echo=False)
    folder = records.record_run(out, "rec", root=tmp_path, say=lambda _: None)
    record = records.read_record(folder)
    assert record["machine"]["threads"] == 1
    # The resume at step 6 on the same machine adds nothing; at step 9 it does.
    parts = [(p["step"], p["machine"]["threads"]) for p in record["resumed"]]
    assert parts == [(9, 2)]
    cpu, precision = record["machine"]["cpu"], record["precision"]
    expected = f"{cpu}, 1 thread, {precision}; from step 9: {cpu}, 2 threads"
    assert records.machine_line(record) == expected


def test_subset_score_is_an_accuracy(classify_run, tmp_path, imdb_mirror):
    folder = records.record_run(
        classify_run, "c", weights=True, root=tmp_path, data_dir=imdb_mirror
    )
    subset = records.read_record(folder)["subset"]
    settings, _, _ = records.SUBSETS["classify"]
    task, model = runner.load_model(classify_run / "final.pt", data_dir=imdb_mirror)
    task.config = dataclasses.replace(task.config, **settings)
    data = task.reviews("test")
    with torch.no_grad():  # one review at a time: no padding, no batching
        right = sum(
            int(model(torch.tensor([ids])).argmax()) == label
            for ids, label in zip(data.ids, data.labels, strict=True)
        )
    assert len(data.labels) == 200
    assert subset["value"] == pytest.approx(right / 200, abs=1e-12)


def test_half_weights_and_tied_embeddings(tmp_path, multi30k_mirror, one_thread):
    run, mirror = tmp_path / "tr", multi30k_mirror
    settings = {"settings": TRANSLATE, "data_dir": mirror}
    runner.train("translate", run, preset="tiny", **settings)
    folder = records.record_run(
        run, "tr", weights=True, half=True, root=tmp_path / "res", data_dir=mirror
    )
    record = records.read_record(folder)
    assert record["weights"]["dtype"] == "float16"
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        aliases = json.loads(f.metadata()["aliases"])
        stored = set(f.keys())
    assert aliases and not stored & set(aliases)  # a tied matrix is stored once
    bleu = record["weights"]["test_rescored"]["bleu"]
    assert bleu == pytest.approx(record["metrics"]["test"]["bleu"], abs=0.005)


def test_ensure_run_loads_a_matching_record_and_trains_nothing(
    classify_run, tmp_path, imdb_mirror, monkeypatch
):
    res = tmp_path / "res"
    records.record_run(classify_run, "cls", weights=True, root=res)
    monkeypatch.setenv("AT_RESULTS", str(res))
    out = tmp_path / "never"
    options = {"settings": CLASSIFY, "data_dir": imdb_mirror}
    result = runner.ensure_run("classify", "tiny", out, **options)
    assert not out.exists() and result.out == res / "cls"
    assert result.metrics == json.loads((classify_run / "metrics.json").read_text())
    assert len(result.history) == len(runner.load_run(classify_run).history)
    other = runner.new_config("classify", "tiny", [*CLASSIFY, "lr=0.01"])
    assert records.matching_record("classify", "tiny", other) is None
    tested = runner.new_config("classify", "tiny", [*CLASSIFY, "test_subset=50"])
    assert records.matching_record("classify", "tiny", tested) is None


def test_a_record_without_weights_serves_a_caller_that_needs_none(
    classify_run, tmp_path, monkeypatch
):
    res = tmp_path / "res"
    folder = records.record_run(classify_run, "figures", root=res, threads=1)
    assert (folder / "state.json").is_file()  # plain text, even without weights
    assert not (folder / "model.safetensors").exists()
    monkeypatch.setenv("AT_RESULTS", str(res))
    wanted = runner.new_config("classify", "tiny", CLASSIFY)
    assert records.matching_record("classify", "tiny", wanted) is None
    found = records.matching_record("classify", "tiny", wanted, weights=False)
    assert found == folder
    out = tmp_path / "never"
    nowhere = tmp_path / "no-data"  # its task comes from state.json: no data read
    options = {"settings": CLASSIFY, "data_dir": nowhere, "weights": False}
    result = runner.ensure_run("classify", "tiny", out, **options)
    run = runner.load_run(classify_run)
    assert not out.exists() and result.out == folder and not result.has_model
    assert result.metrics == run.metrics
    assert result.history.equals(run.history)
    assert result.metrics["parameters"] == count_parameters(run.model)
    assert result.machine["cpu"] == run.machine["cpu"] == cpu_model()
    assert result.task.vocab.itos == run.task.vocab.itos
    with pytest.raises(records.RecordError, match="publishes no weights") as error:
        result.model  # noqa: B018
    assert "\n" not in str(error.value) and "--weights" in str(error.value)
    assert record_command(folder) in str(error.value)
    # A record with weights gives its model, asked for or not.
    records.record_run(classify_run, "full", weights=True, root=res)
    for weights in (True, False):
        loaded = records.load_result(res / "full", weights=weights)
        assert loaded.has_model and loaded.model.training is False


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("AMD EPYC (family 25, model 17)", "AMD EPYC"),
        (
            "Intel(R) Xeon(R) Processor @ 2.80GHz (family 6, model 106)",
            "Intel Xeon",
        ),
        (
            "Intel(R) Core(TM) i7-1165G7 @ 2.80GHz (family 6, model 140)",
            "Intel Core i7-1165G7",
        ),
        ("AMD Ryzen 7 5800X 8-Core Processor", "AMD Ryzen 7 5800X 8-Core"),
        ("Apple M2", "Apple M2"),
    ],
)
def test_a_cpu_is_named_in_a_few_words(name, short):
    assert short_cpu(name) == short


def record_command(folder: Path) -> str:
    return records.read_record(folder)["command"]


def test_a_soup_of_records_is_the_soup_of_their_runs(
    classify_run, tmp_path, imdb_mirror, one_thread
):
    other = tmp_path / "other"
    train_classifier(other, imdb_mirror, settings=[*CLASSIFY, "lr=1e-3"])
    res, runs = tmp_path / "res", [classify_run, other]
    folders = [
        records.record_run(run, name, weights=True, root=res, data_dir=imdb_mirror)
        for run, name in zip(runs, ("a", "b"), strict=True)
    ]
    finals = [run / "final.pt" for run in runs]
    _, want = runner.load_model(finals)
    tokens = torch.randint(4, 200, (3, 20))
    for soup in (folders, [folders[0], finals[1]], [finals[0], folders[1]]):
        _, got = runner.load_model(soup)
        assert got.state_dict().keys() == want.state_dict().keys()
        for name, tensor in want.state_dict().items():
            torch.testing.assert_close(got.state_dict()[name], tensor)
        with torch.no_grad():
            torch.testing.assert_close(got(tokens), want(tokens))

    # The command line scores them alike.
    def evaluate(*paths: Path) -> tuple[int, str, str]:
        given = [arg for path in paths for arg in ("--checkpoint", path)]
        return command("classify", "evaluate", "--data-dir", imdb_mirror, *given)

    from_records, from_runs = evaluate(*folders), evaluate(*finals)
    assert from_records == from_runs and from_runs[0] == 0, from_records
    # A record without weights: one line that says so.
    bare = records.record_run(classify_run, "bare", root=res, threads=1)
    code, _, err = evaluate(folders[0], bare)
    assert code == 1 and err.count("\n") == 1 and "publishes no weights" in err


# ------------------------------------------------------- the committed records


@pytest.mark.parametrize("folder", PUBLISHED, ids=lambda f: f.name)
def test_published_model_scores_its_subset_again(folder, request, one_thread):
    record = records.read_record(folder)
    data = request.getfixturevalue(f"{MIRRORS[record['task']]}_mirror")
    settings, method, key = records.SUBSETS[record["task"]]
    task, model = records.load_model(folder, data_dir=data, settings=settings)
    value = getattr(task, method)(model)[key]
    tolerance = {"accuracy": 1 / 200, "bleu": 0.3}.get(key, 1e-3)
    assert value == pytest.approx(record["subset"]["value"], abs=tolerance)


def test_records_are_plain_text_and_safetensors():
    for path in RESULTS.rglob("*"):
        if path.is_dir():
            continue
        assert path.suffix in PLAIN, f"{path}: records hold {sorted(PLAIN)} only"
        head = path.read_bytes()[:2]
        assert head[:1] != b"\x80" and head != b"PK", f"{path}: a pickle or zip"
        if path.suffix == ".json":
            json.loads(path.read_text())
        if path.suffix == ".safetensors":
            with safe_open(str(path), "pt") as f:
                assert list(f.keys())
    total = sum(p.stat().st_size for p in RESULTS.rglob("*.safetensors"))
    assert total <= 64 * 2**20, f"published weights: {total / 2**20:.1f} MB"
    for folder, record in records.all_records(RESULTS):
        assert record["name"] == folder.name and record["task"] in TASKS
        for key in ("command", "git", "machine", "precision", "metrics"):
            assert record[key], f"{folder.name}: {key} missing"


def test_cited_figures_agree_with_their_records():
    texts = [ROOT / "README.md"]
    texts += sorted(ROOT.glob("notebooks/*.py")) + sorted(ROOT.glob("book/*.md"))
    problems = [
        f"{path.relative_to(ROOT)}: {problem}"
        for path in texts
        if path.is_file()
        for problem in page.check_citations(path.read_text(), RESULTS)
    ]
    assert not problems, "\n".join(problems)


def test_check_citations_catches_a_wrong_figure(classify_run, tmp_path):
    records.record_run(classify_run, "c", root=tmp_path, threads=1)
    metrics = json.loads((classify_run / "metrics.json").read_text())
    right = f"{100 * metrics['test']['accuracy']:.2f}"
    wrong = f"{100 * metrics['test']['accuracy'] + 0.01:.2f}"
    marker = "<!-- record c metrics.test.accuracy % -->"
    assert page.check_citations(f"**{right} %**{marker}", tmp_path) == []
    assert page.check_citations(f"{wrong}%{marker}", tmp_path) == [
        f"{wrong}: record c metrics.test.accuracy is {right}"
    ]
    assert len(page.check_citations(f"{right} % of it{marker}", tmp_path)) == 1


def test_a_figure_citing_two_records_is_their_mean(tmp_path):
    for name, bits in (("a-s0", 2.5), ("a-s1", 2.6)):
        (tmp_path / name).mkdir()
        record = {"name": name, "metrics": {"test": {"bpb": bits}}}
        record |= {"task": "lm", "preset": "tiny", "config": {}, "command": "x"}
        (tmp_path / name / "record.json").write_text(json.dumps(record))
    marker = "<!-- record a-s0+a-s1 metrics.test.bpb -->"
    assert page.check_citations(f"2.55{marker}", tmp_path) == []
    assert page.check_citations(f"2.60{marker}", tmp_path) == [
        "2.60: record a-s0+a-s1 metrics.test.bpb is 2.55"
    ]
    assert page.check_citations(
        "2.55<!-- record a-s0+b metrics.test.bpb -->", tmp_path
    ) == ["2.55: no record 'b' in results/"]


def test_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 12 * 1024
    section = readme.partition("## Headline results")[2].partition("\n## ")[0]
    lines = [line for line in section.splitlines() if line.startswith("- ")]
    assert len(lines) <= 6
    assert all(page.cited_figures(line) for line in lines), "a figure, no record"
    # links that work on the repository's host and in a clone: the stored notebooks
    pages = re.findall(r"\]\(notebooks/(\d\d_\w+)\.ipynb\)", readme)
    chapters = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
    assert sorted(pages) == chapters
    targets = re.findall(r"\]\(([^)#]+)", readme)
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert not missing, f"README links to files not in the repository: {missing}"


def test_results_page_is_up_to_date_and_in_the_toc():
    assert page.render(RESULTS) == page.PAGE.read_text(), (
        f"book/results.ipynb is stale: run python -m {page.MODULE}"
    )
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    assert "results" in files


def test_a_records_weights_stored_again_in_half(
    classify_run, tmp_path, imdb_mirror
):
    """``record results/X --weights --half --replace``: the same record, its weights
    in float16 after the full test from them gave its figure; refused without
    --half, and for weights already in float16."""
    res = tmp_path / "res"
    folder = records.record_run(
        classify_run, "cls", weights=True, root=res, data_dir=imdb_mirror
    )
    before = records.read_record(folder)
    code, _, err = command("record", folder, "--name", "cls", "--results", res,
                           "--replace", "--weights")  # fmt: skip
    assert code == 1 and err.count("\n") == 1 and "--half" in err
    records.record_run(
        folder, "cls", weights=True, half=True, replace=True, root=res,
        data_dir=imdb_mirror,
    )  # fmt: skip
    after = records.read_record(folder)
    assert after["weights"]["dtype"] == "float16"
    assert after["weights"]["bytes"] < 0.6 * before["weights"]["bytes"]
    rescored = after["weights"]["test_rescored"]["accuracy"]
    assert round(rescored, 4) == round(before["metrics"]["test"]["accuracy"], 4)
    changed = ("weights", "subset", "checksums")
    assert {k: v for k, v in after.items() if k not in changed} == {
        k: v for k, v in before.items() if k not in changed
    }
    weights = hashlib.sha256((folder / "model.safetensors").read_bytes())
    assert after["checksums"] == before["checksums"] | {
        "model.safetensors": weights.hexdigest()
    }
    assert (folder / "history.csv").is_file() and (folder / "state.json").is_file()
    with pytest.raises(records.RecordError, match="no float32 weights"):
        records.record_run(folder, "cls2", weights=True, half=True, root=res)


# ------------------------------------------------ damaged records and run folders


def one_line(argv: list, *fragments: str) -> str:
    """``argv`` fails with exit status 1 and one line on stderr holding
    ``fragments``."""
    code, out, err = command(*argv)
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err
    return err


def test_damaged_record_weights_and_record_json_are_named(
    classify_run, tmp_path, imdb_mirror
):
    """A record's weights are checked against the sha256 its record.json stores:
    20 flipped bytes or a truncated file are one line naming the file, never a
    model that predicts garbage; so is a record.json that is not a record's."""
    res = tmp_path / "res"
    folder = records.record_run(
        classify_run, "cls", weights=True, root=res, data_dir=imdb_mirror
    )
    weights = folder / "model.safetensors"
    intact = weights.read_bytes()
    predict = ["classify", "predict", "--checkpoint", folder, "A fine film."]
    evaluate = ["classify", "evaluate", "--checkpoint", folder]
    evaluate += ["--data-dir", imdb_mirror]
    middle = len(intact) // 2
    flipped = bytearray(intact)
    flipped[middle : middle + 20] = bytes(b ^ 0xFF for b in flipped[middle:][:20])
    for damaged in (bytes(flipped), intact[: len(intact) // 3], intact[:10]):
        weights.write_bytes(damaged)
        for argv in (predict, evaluate):
            one_line(argv, f"{weights} is damaged", "sha256", "record.json")
        with pytest.raises(records.RecordError, match="is damaged"):
            records.load_model(folder)
    weights.write_bytes(intact)
    assert command(*predict)[0] == 0
    record = folder / "record.json"
    text = record.read_text()
    for garbage, said in [
        ("{}", "lacks 'task'"),
        ("[]", "holds a list, not a JSON object"),
        ("\x00garbage", "is not valid JSON"),
        (text.replace('"command"', '"commands"'), "lacks 'command'"),
        (text.replace('"config": {', '"config": {"future_setting": 1, ', 1),
         "unknown settings (future_setting)"),
    ]:  # fmt: skip
        record.write_text(garbage)
        one_line(predict, str(folder), said)
    record.write_text(text)
    (folder / "state.json").write_text("[1")
    one_line(predict, f"{folder / 'state.json'} is damaged", "sha256")


@pytest.mark.parametrize("name", ["metrics.json", "provenance.json"])
@pytest.mark.parametrize("content", ["{}", "[]", "garbage"])
def test_damaged_run_files_are_named_when_recorded(
    name, content, classify_run, tmp_path
):
    import shutil

    run = shutil.copytree(classify_run, tmp_path / "run")
    (run / name).write_text(content)
    argv = ["record", run, "--name", "x", "--results", tmp_path / "res"]
    one_line(argv, str(run / name))
    assert not (tmp_path / "res" / "x").exists()


def test_a_full_disk_while_publishing_weights_is_one_line(
    classify_run, tmp_path, imdb_mirror, full_disk
):
    """``record --weights --replace`` on a disk with room for every file but the
    weights: one line, and the old record survives, whole."""
    res = tmp_path / "res"
    sizes = records.record_run(
        classify_run, "sizes", weights=True, root=res, data_dir=imdb_mirror
    )
    room = max(
        p.stat().st_size for p in sizes.iterdir() if p.suffix != ".safetensors"
    )
    assert (sizes / "model.safetensors").stat().st_size > room + 1
    folder = records.record_run(classify_run, "cls", root=res, threads=1)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    argv = ["record", classify_run, "--name", "cls", "--results", res]
    argv += ["--weights", "--replace", "--data-dir", imdb_mirror]
    with full_disk(room + 1):
        one_line(argv, "no space left", "model.safetensors")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in res.iterdir()) == ["cls", "sizes"]


def test_old_metrics_are_refiled_under_the_split_they_scored():
    """Metrics written when every final score was filed as ``test``: a score on
    the validation split moves beside the validation scores (``val_`` dropped),
    a test split's stays; written out by hand."""
    lm = {
        "validation": {"last": 2.2},
        "test": {"split": "val", "bits_per_byte": 2.1},
    }
    assert records.current(lm) == {
        "validation": {"last": 2.2, "split": "val", "bits_per_byte": 2.1}
    }
    mlm = {
        "validation": {"last": 4.3},
        "test": {"split": "val", "val_accuracy": 0.3},
    }
    assert records.current(mlm)["validation"] == {
        "last": 4.3,
        "split": "val",
        "accuracy": 0.3,
    }
    imdb = {
        "validation": {"last": 0.9},
        "test": {"split": "test", "accuracy": 0.88},
    }
    assert records.current(imdb) == imdb
    assert records.scored_section(records.current(lm)) == "validation"
    assert records.scored_section(imdb) == "test"
