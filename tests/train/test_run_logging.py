"""What a run tells TensorBoard, W&B and the report besides its scalars (issue 42, item 3): histograms, a table
of completions, a contact sheet of a step's views, the config as hparams, wall-clock and memory, the step-0
held-out evaluation, and why a curve is flat at zero."""
import json
import sys
import types

import pytest
import torch
from PIL import Image

from mmrl.train.metrics import MetricsLogger, flatten
from mmrl.train.report import flat_zero_notes, write_report
from mmrl.train.step_details import completions_markdown, per_response


def _events(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0, "images": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    return acc


def _details():
    return {"histograms": {"reward": torch.tensor([0.0, 1.0, 1.0]), "advantage": torch.tensor([-1.0, 0.5, 0.5]),
                           "response_len": torch.tensor([3.0, 4.0, 4.0])},
            "completions": [{"sample": "s1", "view": "blank", "role": "abstain", "prompt": "Which way?",
                             "response": "A | B\nC", "reward": 1.0, "advantage": 0.5, "expected": "abstain"}],
            "contact_sheet": Image.new("RGB", (40, 20), (255, 0, 0))}


def test_per_response_advantage_of_token_level_advantages():
    """[N, T] advantages: the mean over a response's real tokens (length 2 -> (1 + 3) / 2; length 3 -> 6 / 3)."""
    adv = torch.tensor([[1.0, 3.0, 100.0], [1.0, 2.0, 3.0]])
    assert per_response(adv, torch.tensor([2, 3])).tolist() == [2.0, 2.0]
    assert per_response(torch.tensor([0.5, -0.5]), torch.tensor([1, 1])).tolist() == [0.5, -0.5]


def test_completions_table_escapes_pipes_and_line_breaks():
    text = completions_markdown(_details()["completions"])
    assert text.splitlines() == ["| sample | view | role | prompt | response | reward | advantage | expected |",
                                 "|---|---|---|---|---|---|---|---|",
                                 "| s1 | blank | abstain | Which way? | A \\| B C | 1.0 | 0.5 | abstain |"]


def test_tensorboard_gets_histograms_text_image_config_and_hparams(tmp_path):
    log = MetricsLogger(str(tmp_path), config={"train": {"lr": 1e-4, "steps": 2}, "rewards": [{"name": "accuracy"}]})
    log.log(1, {"reward/total": 0.5, "time/elapsed": 12.0})
    log.log_details(1, _details())
    log.close()
    acc = _events(tmp_path)
    assert acc.Tags()["histograms"] == ["hist/reward", "hist/advantage", "hist/response_len"]
    assert acc.Histograms("hist/reward")[0].histogram_value.num == 3.0
    assert acc.Histograms("hist/reward")[0].histogram_value.sum == 2.0
    assert acc.Tags()["images"] == ["samples/views"]
    img = acc.Images("samples/views")[0]
    assert (img.width, img.height) == (40, 20)
    texts = set(acc.Tags()["tensors"])
    assert texts == {"config/text_summary", "samples/completions/text_summary"}
    table = acc.Tensors("samples/completions/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "| s1 | blank | abstain | Which way? | A \\| B C |" in table
    assert "lr: 0.0001" in acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    from tensorboard.plugins.hparams import plugin_data_pb2

    hp = [e for e in acc.summary_metadata.values() if e.plugin_data.plugin_name == "hparams"]
    infos = [plugin_data_pb2.HParamsPluginData.FromString(m.plugin_data.content) for m in hp]
    start = next(i.session_start_info for i in infos if i.HasField("session_start_info"))
    assert start.hparams["train.lr"].number_value == 1e-4 and start.hparams["train.steps"].number_value == 2
    assert start.hparams["rewards"].string_value == "[{'name': 'accuracy'}]"
    assert [e.value for e in acc.Scalars("time/elapsed")] == [12.0]


def test_flatten_config():
    assert flatten({"a": {"b": 1, "c": {"d": None}}, "e": [1], "f": {}}) == {"a.b": 1, "a.c.d": None, "e": [1], "f": {}}


def test_wandb_gets_the_same_details(tmp_path, monkeypatch):
    """train.wandb_project: histograms, the completions table and the contact sheet as W&B objects (a stand-in
    module records them: wandb is optional)."""
    calls = []

    class Run:
        def log(self, metrics, step):
            calls.append((step, metrics))

        def finish(self):
            pass

    fake = types.ModuleType("wandb")
    fake.init = lambda **kw: Run()
    fake.Histogram = lambda values: ("Histogram", values)
    fake.Table = lambda columns, data: ("Table", columns, data)
    fake.Image = lambda image: ("Image", image.size)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    log = MetricsLogger(str(tmp_path), tensorboard=False, wandb_project="p")
    log.log_details(3, _details())
    step, got = calls[-1]
    assert step == 3 and got["hist/reward"] == ("Histogram", [0.0, 1.0, 1.0])
    assert got["samples/completions"][1][:3] == ["sample", "view", "role"] and got["samples/completions"][2][0][0] == "s1"
    assert got["samples/views"] == ("Image", (40, 20))


def test_elapsed_continues_after_a_resume(tmp_path):
    log = MetricsLogger(str(tmp_path), tensorboard=False)
    for step, t in ((1, 10.0), (2, 20.0), (3, 30.0)):
        log.log(step, {"time/elapsed": t})
    assert MetricsLogger(str(tmp_path), resume_step=2, tensorboard=False).elapsed_before == 20.0
    assert MetricsLogger(str(tmp_path), tensorboard=False).elapsed_before == 0.0  # a fresh start


def test_flat_zero_notes_name_the_config_key():
    rows = [{"step": 1, "kl": 0.0, "clip_frac": 0.0}, {"step": 2, "kl": 0.0, "clip_frac": 0.0}]
    notes = flat_zero_notes(rows, {"kl_coef": 0.0, "ppo_epochs": 1})
    assert notes["kl"].startswith("algorithm.kl_coef = 0") and notes["clip_frac"].startswith("algorithm.ppo_epochs = 1")
    assert flat_zero_notes(rows, {"kl_coef": 0.04, "ppo_epochs": 2}) == {}  # flat, but not by the config
    assert flat_zero_notes([{"step": 1, "kl": 0.01}], {"kl_coef": 0.0}) == {}  # not flat



def test_a_policy_loss_of_float_rounding_says_why():
    """The demo's GRPO loss (ppo_epochs 1, kl_coef 0, seq-mean-token-mean) is -mean(A) = 0 up to rounding: a note;
    a loss of 2e-6, or the same loss with token-mean aggregation (-sum A_i L_i / sum L_i, not 0), gets none."""
    grpo = {"ppo_epochs": 1, "kl_coef": 0.0, "loss_agg": "seq-mean-token-mean"}
    rows = [{"step": 1, "loss": 1.5e-8}, {"step": 2, "loss": -3.7e-8}]
    assert flat_zero_notes(rows, grpo)["loss"].startswith("algorithm.ppo_epochs = 1, kl_coef = 0, a seq-mean")
    assert "loss" not in flat_zero_notes(rows + [{"step": 3, "loss": 2e-6}], grpo)
    assert "loss" not in flat_zero_notes(rows, {**grpo, "loss_agg": "token-mean"})
    assert "loss" not in flat_zero_notes(rows, {**grpo, "kl_coef": 0.04})
    assert "kl" not in flat_zero_notes([{"step": 1, "kl": 1e-8}], grpo)  # kl has no tolerance: exactly 0 only

def test_report_first_column_is_each_metrics_own_first_step(tmp_path):
    """Held-out metrics start at their step-0 evaluation (and a train metric at step 1); kl is explained."""
    rows = [{"step": 0, "eval/accuracy": 0.68}]
    rows += [{"step": i, "reward/total": 0.1 * i, "kl": 0.0, **({"eval/accuracy": 0.59} if i == 2 else {})}
             for i in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "config.yaml").write_text("algorithm: {kl_coef: 0.0, ppo_epochs: 1}\n")
    text = write_report(str(tmp_path)).read_text()
    assert "| eval/accuracy | 0.68 | 0 | 0.59 | 2 |" in text
    assert "| reward/total | 0.1 | 1 | 0.3 | 3 |" in text
    assert "Step 0 is the starting model" in text
    assert "`kl` is 0 at every step: algorithm.kl_coef = 0: the loss has no KL term" in text


def test_the_two_ess_lines_have_their_own_legend_names():
    """mismatch/ess and rollout_corr/ess share an axis; both used to read "ess" in the legend."""
    from mmrl.train.report import _label

    assert (_label("mismatch/ess"), _label("rollout_corr/ess")) == ("raw ratios", "applied weights")


@pytest.mark.slow
def test_a_run_logs_step_zero_details_and_progress_lines(video_world, tiny_model_path, tmp_path, capsys):
    """A 2-step run evaluating every 2 steps: a step-0 held-out row before the first update, every detail in
    TensorBoard, wall-clock and memory scalars, and progress lines on the (captured, non-terminal) stdout."""
    from support import small_overrides

    from mmrl.config import load_config
    from mmrl.train.rl_trainer import RLTrainer

    out = tmp_path / "run"
    cfg = load_config(None, small_overrides(video_world, out, tiny_model_path)
                      + ["train.steps=2", "train.eval_every=2", "train.eval_limit=4", "train.log_every_s=0",
                         "train.log_samples_every=2"])
    RLTrainer(cfg).run()
    rows = MetricsLogger.read(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert "eval/accuracy" in rows[0] and "reward/total" not in rows[0] and "eval/accuracy" in rows[2]
    assert rows[1]["mem/rss_peak_gb"] > 0 and rows[2]["time/elapsed"] >= rows[1]["time/elapsed"] > 0
    acc = _events(out)
    assert [e.step for e in acc.Scalars("eval/accuracy")] == [0, 2]
    assert [e.step for e in acc.Histograms("hist/advantage")] == [1, 2]
    # the completions table and the contact sheet at step 1 and every log_samples_every (2)
    assert [e.step for e in acc.Images("samples/views")] == [1, 2]
    assert [e.step for e in acc.Tensors("samples/completions/text_summary")] == [1, 2]
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("train step ")]
    assert [x.split(" | ")[0] for x in lines] == ["train step 1/2 (50%)", "train step 2/2 (100%)"]
    assert "| eval/accuracy |" in (out / "report.md").read_text()


def test_completions_spread_over_prompts_and_views():
    """Groups a,a,a,b,b,c (one view each) and 4 rows: the first of a, b, c, then a's second (indices 0, 3, 5, 1)."""
    from mmrl.train.step_details import spread

    trajs = [types.SimpleNamespace(sample_id=s, view="original") for s in "aaabbc"]
    assert spread(trajs, 4) == [0, 3, 5, 1]
    assert [trajs[i].sample_id for i in spread(trajs, 4)] == ["a", "b", "c", "a"]


@pytest.mark.slow
def test_held_out_evaluations_leave_training_bit_for_bit_unchanged(video_world, tiny_model_path, tmp_path):
    """3 steps with held-out evaluations at steps 0 and 2 (``eval_every=2``) log the same training metrics, to the
    last bit, as the same 3 steps without any: an evaluation draws no training randomness (global RNG, data stream)
    and leaves the model as it found it."""
    from support import small_overrides, varying_reward_cfg, without_measurements

    from mmrl.train.rl_trainer import RLTrainer

    def train_rows(name, eval_every):
        cfg = varying_reward_cfg(small_overrides(video_world, tmp_path / name, tiny_model_path)  # rewards that vary
                                 + ["train.steps=3", f"train.eval_every={eval_every}", "train.eval_limit=4",
                                    "train.save_every=0"])
        RLTrainer(cfg, quiet=True).run()
        rows = without_measurements(MetricsLogger.read(tmp_path / name / "metrics.jsonl"))
        return [{k: v for k, v in r.items() if not k.startswith("eval/")} for r in rows if r["step"] > 0]

    plain, evaluated = train_rows("plain", 0), train_rows("evaluated", 2)
    assert [r["step"] for r in plain] == [1, 2, 3] and all(r["grad_norm"] > 0 for r in plain)  # it trained
    assert evaluated == plain
