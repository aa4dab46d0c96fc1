"""mmrl diagnose: records on fixed traces of the claims world, summary numbers, and the CLI on a tiny run."""
import argparse
import json

import pytest
import torch

from mmrl.config import DataConfig, PromptConfig
from mmrl.data.annotations import load_samples
from mmrl.data.schema import Trajectory
from mmrl.data.synth_claims import claim_support, make_claims_world
from mmrl.diagnose.cli import add_parser
from mmrl.diagnose.core import intervened_logprobs, response_records, summarize, summarize_all
from mmrl.models.loading import load_model, load_processor
from mmrl.models.scoring import response_logprobs
from mmrl.rollout.step_inputs import build_step_inputs


@pytest.fixture(scope="module")
def claims_world(tmp_path_factory):
    out = tmp_path_factory.mktemp("claims_diag")
    info = make_claims_world(str(out), n_train=4, n_test=6, seed=1, unsupported_rate=0.5)
    return out, info


def _trace_trajs(si, tok):
    trajs = []
    for k, req in enumerate(si.requests):
        text = si.samples[req.sample_id].meta["sft_response"]
        ids = torch.tensor(tok.encode(text, add_special_tokens=False))
        trajs.append(Trajectory(sample_id=req.sample_id, group_id=k, view=req.view, role=req.role,
                                prompt_ids=req.inputs.input_ids, response_ids=ids, logprobs=torch.zeros(len(ids)),
                                loss_mask=torch.ones(len(ids), dtype=torch.bool), text=text, expected=req.expected,
                                inputs_key=k))
    return trajs


def test_records_on_fixed_traces(tiny_model_path, claims_world):
    out, info = claims_world
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    samples, _ = load_samples(info["test"], str(out))
    data = DataConfig(max_pixels=3136)
    si = build_step_inputs(samples, proc, data, lambda r, *_: 1)
    trajs = _trace_trajs(si, proc.tokenizer)
    orig = response_logprobs(model, [(si.requests[t.inputs_key].inputs, t.response_ids) for t in trajs])
    inter = intervened_logprobs(model, proc, si, trajs, data, "full_mask", {})
    decode = lambda ids: proc.tokenizer.decode(ids)  # noqa: E731
    recs = response_records(trajs, si, orig, inter, decode, labeler=claim_support)
    n_unsup = 0
    for r, t in zip(recs, trajs):
        meta = si.samples[t.sample_id].meta
        assert r["correct"] and [c["text"] for c in r["claims"]] == [c["text"] for c in meta["claims"]]
        assert [c["supported"] for c in r["claims"]] == [c["supported"] for c in meta["claims"]]
        assert all(0 < c["persistence"] <= 1 and 0 <= c["efs"] <= 10 for c in r["claims"])
        assert len(r["efs_tokens"]) == len(t.response_ids)
        n_unsup += not all(c["supported"] for c in meta["claims"])
    s = summarize(recs)
    assert s["accuracy"] == 1.0 and s["n_claims"] == 2 * len(recs)
    assert s["correct_with_unsupported"] == pytest.approx(n_unsup / len(recs))
    assert s["n_unsupported"] == n_unsup and s["efs_token_mean"] > 0  # full_mask changes the tiny model's output
    # the same response under the same media: persistence 1 and EFS 0 everywhere
    same = response_records(trajs, si, orig, orig, decode, labeler=claim_support)
    assert all(c["persistence"] == 1.0 and c["efs"] == 0.0 for r in same for c in r["claims"])
    # an extra intervention's numbers (as diagnose_samples(also=...) stores them) are summarized with its suffix
    for r, x in zip(recs, same):
        r["efs_tokens_same"] = x["efs_tokens"]
        for c, cx in zip(r["claims"], x["claims"]):
            c["persistence_same"], c["efs_same"] = cx["persistence"], cx["efs"]
    both = summarize_all(recs, ["same"])
    assert both["persistence_supported_same"] == 1.0 and both["efs_token_mean_same"] == 0.0
    assert both["persistence_supported"] == s["persistence_supported"] < 1.0 and "accuracy_same" not in both
    # without a labeler nothing label-based is reported
    assert "correct_with_unsupported" not in summarize(response_records(trajs, si, orig, inter, decode))
    # with the world's content extractor: persistence over the colour / location word's tokens only (NaN without)
    from mmrl.algos.pacg_gate import log_ratio, retention_tokens
    from mmrl.data.synth_claims import claim_content

    assert all(c["persistence_content"] != c["persistence_content"] for r in recs for c in r["claims"])
    rc = response_records(trajs, si, orig, inter, decode, labeler=claim_support, extractor=claim_content)
    for r, t in zip(rc, trajs):
        ret = retention_tokens(log_ratio(inter[trajs.index(t)], orig[trajs.index(t)]))
        for c in r["claims"]:
            ids = t.response_ids.tolist()
            a, b = c["tokens"]
            word = [k for k in range(a, b) if decode(ids[k:k + 1]).strip() in ("red", "green", "blue", "yellow", "left",
                                                                                "right", "top", "bottom")]
            assert c["content_tokens"] == len(word) == 1
            assert c["persistence_content"] == pytest.approx(float(ret[word].mean()), abs=1e-6)
            assert c["persistence"] == pytest.approx(float(ret[a:b].mean()), abs=1e-6)


def test_diagnose_cli_two_checkpoints(tiny_model_path, claims_world, tmp_path):
    out, info = claims_world
    p = argparse.ArgumentParser()
    add_parser(p.add_subparsers(dest="cmd"))
    dest = tmp_path / "diag"
    args = p.parse_args(["diagnose", "--checkpoint", tiny_model_path, "--checkpoint", tiny_model_path,
                         "--steps", "0,50", "--data", info["test"], "--media-root", str(out), "--out", str(dest),
                         "--labeler", "mmrl.data.synth_claims:claim_support", "--limit", "2", "--max-new-tokens", "6",
                         "--intervention-param", "p=0.5", "--also-intervention", "full_mask", "data.max_pixels=3136"])
    res = args.fn(args)
    lines = (dest / "responses.jsonl").read_text().splitlines()
    assert len(lines) == 4 and {json.loads(x)["step"] for x in lines} == {0.0, 50.0}
    assert len(json.loads((dest / "summary.json").read_text())) == 2
    report = (dest / "report.md").read_text()
    assert "persistence_unsupported" in report and (dest / "by_step.png").exists()
    assert res["summaries"][0]["n_responses"] == 2.0
    # the same responses re-scored on a black image too: its numbers sit next to the patch ones
    rec = json.loads(lines[0])
    assert len(rec["efs_tokens_full_mask"]) == len(rec["efs_tokens"])
    assert all(0.0 < c["persistence_full_mask"] <= 1.0 for c in rec["claims"])
    assert "persistence_supported_full_mask" in report and "efs_token_mean_full_mask" in res["summaries"][1]
    with pytest.raises(Exception, match="--steps has 1 values"):
        args.steps = "0"
        args.fn(args)


def test_diagnose_as_a_training_eval_fn(tiny_model_path, claims_world):
    from types import SimpleNamespace

    from mmrl.config import Config
    from mmrl.diagnose.core import diagnose_eval

    out, info = claims_world
    cfg = Config()
    cfg.data.test, cfg.data.media_root, cfg.data.max_pixels, cfg.rollout.max_new_tokens = info["test"], str(out), 3136, 4
    tr = SimpleNamespace(cfg=cfg, model=load_model(tiny_model_path), processor=load_processor(tiny_model_path))
    m = diagnose_eval(claim_support, limit=2)(tr)
    assert m["diag/n_responses"] == 2.0 and "diag/efs_token_mean" in m
