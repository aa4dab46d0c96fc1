"""Two real rollout servers (vLLM's CPU build, loopback) driven by mmrl's server-mode engine: sampler/scorer parity
before and after weights travel over the gloo transfer group, server-count-invariant seeds, the secret, errors
naming the sample, and a dead server ending a call with a clear message."""
from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from mmrl.errors import MMRLError  # noqa: E402
from server_support import SECRET, start_servers  # noqa: E402

pytestmark = pytest.mark.slow
TOL = 1e-5


@pytest.fixture(scope="module")
def servers(tmp_path_factory, tiny_model_path):
    running = start_servers(tiny_model_path, tmp_path_factory.mktemp("servers"), 2)
    yield running
    for s in running:
        s.stop()


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model_path):
    from mmrl.config import DataConfig
    from mmrl.data.annotations import load_samples
    from mmrl.data.synth_video import make_video_world
    from mmrl.models.loading import load_model, load_processor
    from mmrl.rollout.step_inputs import build_step_inputs

    world = make_video_world(str(tmp_path_factory.mktemp("world")), 4, 2, seed=0, n_frames=4)
    model = load_model(tiny_model_path, "float32", device="cpu")
    proc = load_processor(tiny_model_path)
    samples, _ = load_samples(world["train"], None, on_error="skip")
    si = build_step_inputs(samples[:4], proc, DataConfig(nframes=4, max_pixels=3136), lambda role, n_views: 2)
    for r in si.requests:
        r.meta["seed"] = 100 + int(r.group_id)
    return model, proc, si.requests


def engine_for(model, proc, urls, **kw):
    from mmrl.rollout.vllm_engine import VLLMEngine

    import os
    os.environ["MMRL_ROLLOUT_SECRET"] = SECRET
    return VLLMEngine(model, proc, mode="server", dtype="float32", servers=urls, server_timeout_s=120, **kw)


def parity(engine, model, proc, requests):
    from mmrl.rollout.base import SamplingParams
    from mmrl.rollout.parity import logprob_parity

    return logprob_parity(engine, model, requests, SamplingParams(temperature=1.0, max_new_tokens=6),
                          proc.tokenizer.pad_token_id)


@pytest.mark.parametrize("transfer", ["collective", "http"])
def test_two_servers_parity_before_and_after_a_sync(servers, setup, transfer):
    model, proc, requests = setup
    engine = engine_for(model, proc, [s.url for s in servers], weight_transfer=transfer)
    before = parity(engine, model, proc, requests)
    with torch.no_grad():  # an "optimizer step" on the decoder's trainable weights
        g = torch.Generator().manual_seed(1)
        for n, p in model.named_parameters():
            if "language_model" in n or "embed_tokens" in n:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
    stale = parity(engine, model, proc, requests)
    engine.sync_weights(model)
    after = parity(engine, model, proc, requests)
    print(f"[{transfer}] parity max_abs before {before.max_abs:.2e}, stale {stale.max_abs:.2e}, "
          f"after sync {after.max_abs:.2e} ({after.tokens} tokens, {after.sequences} sequences)")
    assert before.sequences == stale.sequences == after.sequences == sum(r.n for r in requests)  # every completion
    assert before.ok(TOL) and after.ok(TOL)
    assert stale.max_abs > 1e-2  # the servers did hold the old weights until the sync


def test_rollouts_do_not_depend_on_the_server_count(servers, setup):
    from mmrl.rollout.base import SamplingParams

    model, proc, requests = setup
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    engine_for(model, proc, [s.url for s in servers]).sync_weights(model, everything=True)
    two = engine_for(model, proc, [s.url for s in servers]).generate(requests, params)
    one = engine_for(model, proc, [servers[1].url]).generate(requests, params)
    assert len(two) == len(one) == sum(r.n for r in requests)
    assert [t.response_ids.tolist() for t in two] == [t.response_ids.tolist() for t in one]
    assert len({tuple(t.response_ids.tolist()) for t in two}) > 1


def test_requests_without_the_secret_are_refused(servers):
    for path, body in [("/weights/load", b""), ("/reset_caches", b"{}"), ("/generate", b"{}")]:
        req = urllib.request.Request(servers[0].url + path, data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        text = e.value.read().decode()
        print(f"POST {path} without the secret -> {e.value.code} {text}")
        assert e.value.code == 401 and "secret" in json.loads(text)["detail"]


def test_a_failing_request_names_its_sample(servers, tiny_model_path):
    from mmrl.rollout.vllm_client import ServerClient

    client = ServerClient([servers[0].url], timeout=60, secret=SECRET)
    with pytest.raises(MMRLError, match="sample 'clip-7'"):
        client.generate([{"prompt_token_ids": [10**9]}], [{"max_tokens": 2}], groups=[0], samples=["clip-7"])


def test_a_dead_or_hanging_server_ends_the_call(servers, setup):
    from mmrl.rollout.base import SamplingParams
    from mmrl.rollout.vllm_client import RolloutServerError

    model, proc, requests = setup
    engine = engine_for(model, proc, [s.url for s in servers])
    engine.backend.timeout = 5.0
    servers[1].proc.send_signal(signal.SIGSTOP)  # hanging: accepts nothing, answers nothing
    try:
        with pytest.raises(RolloutServerError, match=servers[1].url.replace(".", r"\.") + ".*timeout") as e:
            engine.generate(requests, SamplingParams(max_new_tokens=4))
        print(f"hanging server: {e.value}")
    finally:
        servers[1].proc.send_signal(signal.SIGCONT)
    servers[1].stop()
    with pytest.raises(RolloutServerError, match=servers[1].url.replace(".", r"\.")) as e:
        engine.generate(requests, SamplingParams(max_new_tokens=4))
    print(f"dead server: {e.value}")
