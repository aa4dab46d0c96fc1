"""Skip accounting: skipped.jsonl (id, file, stage, reason), load-time drops counted, no retry in later epochs,
data.max_skip_frac, the end-of-run summary; and eval synthetic counting unusable items in n, scored wrong."""
import json
import shutil

import pytest

from mmrl.data.schema import Sample, VideoRef
from mmrl.errors import DataError
from mmrl.train.data_stream import DataStream
from mmrl.train.skips import SkipLog


def _log(tmp_path, n=10, frac=0.3, resume_step=0):
    return SkipLog(str(tmp_path), "data/train.json", n, frac, {"a": "v/a.mp4", "b": "v/b.mp4"}, resume_step)


def test_rows_are_written_once_per_sample_with_file_stage_and_reason(tmp_path):
    log = _log(tmp_path)
    assert log.add([("x", "item 3: field 'answer': missing")], "load", 0) == 1
    assert log.add([("a", "sample 'a', file 'v/a.mp4': unreadable video"), ("x", "again")], "rollout", 4) == 1
    assert log.add([("a", "again")], "rollout", 5) == 0
    rows = [json.loads(x) for x in (tmp_path / "skipped.jsonl").read_text().splitlines()]
    assert rows == [{"id": "x", "file": "data/train.json", "stage": "load", "reason": "item 3: field 'answer': missing", "step": 0},
                    {"id": "a", "file": "v/a.mp4", "stage": "rollout", "reason": "sample 'a', file 'v/a.mp4': unreadable video", "step": 4}]
    assert log.excluded == {"x", "a"}
    assert log.summary().startswith("2 of 10 samples skipped (1 at load, 1 at rollout)")


def test_limit_and_all_bad(tmp_path):
    log = _log(tmp_path, n=10, frac=0.2)
    log.add([("a", "r1"), ("b", "r2")], "rollout", 1)  # 20%: at the limit, allowed
    with pytest.raises(DataError, match=r"file 'data/train.json': 3 of 10 samples skipped \(30.0%\), more than "
                                        r"data.max_skip_frac=0.2"):
        log.add([("c", "r3")], "rollout", 2)
    log = _log(tmp_path / "2", n=2, frac=1.0)
    with pytest.raises(DataError, match="none of its 2 items is usable"):
        log.add([("a", "bad"), ("b", "bad")], "load", 0)


def test_resume_keeps_rows_up_to_the_checkpoint(tmp_path):
    log = _log(tmp_path)
    log.add([("a", "r")], "rollout", 2)
    log.add([("b", "r")], "rollout", 5)
    again = _log(tmp_path, resume_step=3)  # resumed from step 3: b is tried again, as in the straight run
    assert again.excluded == {"a"} and len((tmp_path / "skipped.jsonl").read_text().splitlines()) == 1
    fresh = _log(tmp_path)  # a fresh run starts an empty log
    assert fresh.excluded == set() and (tmp_path / "skipped.jsonl").read_text() == ""


def test_stream_passes_over_excluded_samples():
    samples = [Sample(id=str(i), question="q", candidates=["a", "b"], answer="a", video=VideoRef("x")) for i in range(4)]
    s = DataStream(samples, 0, shuffle=False)
    s.excluded = {"1"}
    assert [x.id for x in s.next(6)] == ["0", "2", "3", "0", "2", "3"]
    s.excluded = {"0", "1", "2", "3"}
    with pytest.raises(DataError, match="every training sample has been skipped"):
        s.next(1)


def _world(src, dst):
    """Copy of the session world with one unreadable video and one item without its answer."""
    shutil.copytree(src, dst)
    items = json.loads((dst / "train.json").read_text())
    (dst / items[0]["video"]).write_bytes(b"garbage")
    del items[5]["answer"]
    (dst / "train.json").write_text(json.dumps(items))
    return items[0]["id"], items[5]["id"]


@pytest.mark.slow
def test_sft_records_skips_and_never_retries_them(video_world, tiny_model_path, tmp_path, capsys):
    from support import small_overrides
    from mmrl.cli import main
    from mmrl.train.metrics import MetricsLogger

    broken, unanswered = _world(video_world, tmp_path / "w")
    out = tmp_path / "sft"
    # 23 usable samples, 7 steps x 4 = 28 draws: the second epoch begins and must not retry the broken one
    argv = ["sft", "--quiet"] + small_overrides(tmp_path / "w", out, tiny_model_path) + [
        "data.on_error=skip", "data.shuffle=false", "sft.steps=7", "sft.batch_size=4", "train.micro_batch=4",
        "data.preflight=none"]  # the media probe off: the broken video is met mid-run
    assert main(argv) == 0
    captured = capsys.readouterr().out
    assert "2 of 24 samples skipped (1 at load, 1 at sft)" in captured and "skipped.jsonl" in captured
    rows = [json.loads(x) for x in (out / "skipped.jsonl").read_text().splitlines()]
    assert [(r["id"], r["stage"]) for r in rows] == [(unanswered, "load"), (broken, "sft")]
    assert "'answer': missing" in rows[0]["reason"] and rows[1]["file"].endswith(".mp4")
    metrics = MetricsLogger.read(out / "metrics.jsonl")
    assert sum(m["skipped_samples"] for m in metrics) == 1 and metrics[-1]["skipped_total"] == 2
    assert len(metrics) == 7


@pytest.mark.slow
def test_rl_records_rollout_skips(video_world, tiny_model_path, tmp_path):
    from support import small_overrides
    from mmrl.config import load_config
    from mmrl.train.rl_trainer import RLTrainer

    broken, unanswered = _world(video_world, tmp_path / "w")
    over = small_overrides(tmp_path / "w", tmp_path / "rl", tiny_model_path) + [
        "data.on_error=skip", "data.shuffle=false", "train.steps=1", "data.preflight=none"]  # met mid-run
    hist = RLTrainer(load_config(None, over), quiet=True).run()
    assert hist[0]["skipped_samples"] == 1 and hist[0]["skipped_total"] == 2
    rows = [json.loads(x) for x in (tmp_path / "rl" / "skipped.jsonl").read_text().splitlines()]
    assert [(r["id"], r["stage"], r["step"]) for r in rows] == [(unanswered, "load", 0), (broken, "rollout", 1)]


def _test_split_with_two_bad_items(video_world, tmp_path):
    """A copy of the world whose first test item's video is garbage and whose second has no answer."""
    world = tmp_path / "w"
    shutil.copytree(video_world, world)
    items = json.loads((world / "test.json").read_text())
    (world / items[0]["video"]).write_bytes(b"garbage")
    del items[1]["answer"]
    (world / "test.json").write_text(json.dumps(items))
    return world, items


@pytest.mark.slow
def test_eval_counts_load_and_decode_failures_as_wrong(video_world, tiny_model_path, tmp_path):
    from mmrl.config import DataConfig
    from mmrl.eval.synthetic import evaluate_checkpoint

    world, items = _test_split_with_two_bad_items(video_world, tmp_path)
    res = evaluate_checkpoint(tiny_model_path, str(world / "test.json"), DataConfig(on_error="skip", max_pixels=3136),
                              out_dir=str(tmp_path / "ev"))
    rows = [json.loads(x) for x in (tmp_path / "ev" / "predictions.jsonl").read_text().splitlines()]
    assert res["n"] == len(items) == len(rows) and res["errors"] == 2
    errors = {r["id"]: r["error"] for r in rows if "error" in r}
    assert set(errors) == {items[0]["id"], items[1]["id"]} and "'answer': missing" in errors[items[1]["id"]]
    assert res["accuracy"] == sum(r["correct"] for r in rows) / len(items)


def test_report_warns_when_most_groups_carry_no_signal_and_links_skips(tmp_path):
    from mmrl.train.report import ema, no_signal_warning, write_report

    rows = [{"step": i, "adv/zero_frac": 0.2 if i < 30 else 0.94, "loss": 0.1, "entropy": 1.0 / i} for i in range(1, 41)]
    assert "adv/zero_frac averaged 0.94 over the last 10 steps" in no_signal_warning(rows)
    assert no_signal_warning(rows[:30]) == ""
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "skipped.jsonl").write_text('{"id": "a"}\n')
    (tmp_path / "predictions").mkdir()
    for step in (20, 40):
        (tmp_path / "predictions" / f"step_{step:06d}.jsonl").write_text("{}\n")
    text = write_report(str(tmp_path)).read_text()
    assert "[step_000040.jsonl](predictions/step_000040.jsonl)" in text
    assert "**Warning:** most groups carry no signal" in text and "[skipped.jsonl](skipped.jsonl)" in text
    assert (tmp_path / "policy.png").exists() and (tmp_path / "optim.png").exists()
    assert ema([1.0, 1.0, 1.0]) == pytest.approx([1.0, 1.0, 1.0]) and ema([0.0, 1.0], 0.5)[1] == pytest.approx(2 / 3)


@pytest.mark.slow
def test_eval_synthetic_cli_counts_rejected_items(video_world, tmp_path, capsys):
    """Through ``mmrl eval synthetic`` (eval/synthetic.yaml's hooks): an item rejected at load is in n, scored
    wrong and listed in predictions.jsonl, like one that fails to decode."""
    from mmrl.cli import main

    world, items = _test_split_with_two_bad_items(video_world, tmp_path)
    out = tmp_path / "ev"
    assert main(["eval", "synthetic", "--model", "tiny", "--data", str(world / "test.json"), "--out", str(out),
                 "--on-error", "skip", "--device", "cpu", "--no-progress", "--max-new-tokens", "2"]) == 0
    sc = json.loads((out / "summary.json").read_text())["scores"]
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert sc["n"] == len(items) == len(rows) and sc["errors"] == 2
    assert {r["id"] for r in rows if "error" in r} == {items[0]["id"], items[1]["id"]}
