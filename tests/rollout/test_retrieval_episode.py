"""A retrieval episode end to end on the tiny model: ``visual_retrieve`` in the real multi-turn loop returns the
corpus images as a ``<tool_response>`` video turn (one temporal patch per image), recorded in ``turns``, and the
full-sequence scores equal the per-turn sampling log-probs (the stand-in engine of ``test_tool_episodes``)."""
import torch

from mmrl.data.synth_vhop import make_vhop_world
from mmrl.data.vhop_format import load_corpus, query_samples
from mmrl.models.loading import load_model, load_processor
from mmrl.models.scoring import response_logprobs
from mmrl.rollout.agent_loop_tools import tool_loop
from mmrl.rollout.base import SamplingParams
from mmrl.tools import load_suite

from support import REPO
from test_tool_episodes import ScriptedEngine, _request


def test_retrieve_then_answer(video_world, tiny_model_path, tmp_path):
    make_vhop_world(str(tmp_path / "vhop"), 3, 0, seed=0, size=56)
    vhop = query_samples(str(tmp_path / "vhop" / "queries_train.json"))[0][0]
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    req = _request(proc, video_world, n=2)
    req.sample.meta["corpus"] = vhop.meta["corpus"]  # the dataset names the episode's corpus
    suite_file = tmp_path / "retrieval.yaml"
    suite_file.write_text((REPO / "tools" / "retrieval.yaml").read_text().replace("model: tiny ", f"model: {tiny_model_path} "))
    suite = load_suite(str(suite_file))
    script = ['<tool_call>{"name": "visual_retrieve", "arguments": {"query": "the red circle", "k": 2}}</tool_call>',
              "(A)"]
    engine = ScriptedEngine(model, proc.tokenizer, script)
    trajs = tool_loop(proc, suite).run(engine, [req], SamplingParams(max_new_tokens=64))
    tok = proc.tokenizer
    assert '"name": "visual_retrieve"' in tok.decode(engine.prompts[0].input_ids)
    corpus = load_corpus(vhop.meta["corpus"])
    video_pad = tok.convert_tokens_to_ids("<|video_pad|>")
    for t in trajs:
        assert [s.kind for s in t.segments] == ["model", "env", "model"] and t.text == "(A)"
        env = t.segments[1]
        grid = env.vision["video_grid_thw"][0].tolist()
        assert grid[0] == 2  # two images, one temporal patch each
        assert int((env.ids == video_pad).sum()) == grid[0] * grid[1] * grid[2] // 4
        call = t.turns[0]
        assert call["tool"] == "visual_retrieve" and call["valid"] and len(call["retrieved"]) == 2
        assert all(i in corpus for i in call["retrieved"]) and call["call_media_tokens"] == grid[0] * grid[1] * grid[2] // 4
        with torch.no_grad():
            (lp,) = response_logprobs(model, [t.scoring_item([req.inputs])], pad_id=0)
        assert torch.allclose(lp[t.loss_mask], t.logprobs[t.loss_mask], atol=1e-4)
