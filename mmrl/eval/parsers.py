"""Answer parsers / scorers of the benchmark harnesses, each faithful to its source (see specs/benchmarks.md).

Every registered parser has the signature ``fn(response: str | None, gold) -> int`` (1 correct, 0 wrong) and
scores ``None`` (a failed generation) as 0. What ``gold`` is depends on the parser:

- ``mvbench_check_ans``: gold ``"(A) candidate text"``; the response is the model's output after the
  ``Best option:(`` prefill, post-processed by the YAML's ``response`` section (``postprocess``).
  Source: OpenGVLab/Ask-Anything ``video_chat2/mvbench.ipynb`` (``infer_mvbench`` + ``check_ans``).
- ``lmms_mcq_acc``: gold letter ``"A"``. Source: lmms-eval ``lmms_eval/tasks/mvbench/utils.py`` (``mcq_acc``).
- ``ovo_mcq``: gold letter. ``ovo_rec``: gold count (int). ``ovo_yes_no``: gold probe ``type`` (0 = "No",
  1 = "Yes"). Source: JoeLeelyf/OVO-Bench ``utils/OVOBenchScore.py`` (``OVOBenchOfflineScore``).
- ``strict_letter``: gold letter; the stripped response must start with the letter alone (``A``, ``(A)``, ``A.``,
  ``A)``, ``A:``). Not from any harness: a strict cross-check.
"""
from __future__ import annotations

import re
from typing import Any, Optional

from mmrl.errors import DataError
from mmrl.registry import Registry

PARSERS = Registry("answer parser", builtins={__name__: ("lmms_mcq_acc", "mvbench_check_ans", "ovo_mcq", "ovo_rec",
                                                        "ovo_yes_no", "strict_letter")})


def check_ans(pred: str, gt: str) -> bool:
    """Ask-Anything ``check_ans``: compare the first space-separated tokens, lower-cased, by substring.

    Correct if ``pred_option.replace('.', '') in gt_option`` or ``gt_option in pred_option``. An empty first token
    (an empty prediction, or one starting with a space) is a substring of anything, so it counts as correct.
    The original also strips a trailing '.' from the gold text, which never affects the result (and raises
    IndexError on an empty gold text; we don't).
    """
    pred_option = pred.lower().split(" ")[0]
    gt_option = gt.lower().split(" ")[0]
    return pred_option.replace(".", "") in gt_option or gt_option in pred_option


def postprocess(response: Any, strip: bool = False, first_line_only: bool = False, prefix: str = "") -> Any:
    """A benchmark's ``response`` section: ``prefix + (first line of) (stripped) response``; ``None`` stays.

    MVBench original (``infer_mvbench``): ``return_prompt + llm_message.strip().split('\\n')[0]`` with
    ``return_prompt = "("``, i.e. ``strip``, ``first_line_only`` and ``prefix: "("``.
    """
    if not isinstance(response, str):
        return response
    text = response.strip() if strip else response
    if first_line_only:
        text = text.split("\n")[0]
    return prefix + text


@PARSERS.register("mvbench_check_ans")
def mvbench_check_ans(response: Optional[str], gold: str) -> int:
    """MVBench original ``check_ans`` on the post-processed output (the YAML's ``response`` section adds the
    prefilled ``(`` and keeps the first line)."""
    if response is None:
        return 0
    return int(check_ans(response, gold))


# --- lmms-eval mcq_acc (kept literally, including its quirks) ---------------------------------------------------
_PERIOD_STRIP = re.compile(r"(?!<=\d)(\.)(?!\d)")  # sic: "(?!<=" is a lookahead, not a lookbehind
_COMMA_STRIP = re.compile(r"(\d)(\,)(\d)")
_PUNCT = [";", r"/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!"]
_OPTION_RE = re.compile(r"^([A-E])\.\s*(.+)$", re.IGNORECASE)


def _process_punctuation(in_text: str) -> str:
    out = in_text
    for p in _PUNCT:
        if (p + " " in in_text or " " + p in in_text) or (re.search(_COMMA_STRIP, in_text) is not None):
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    # the source calls periodStrip.sub("", out, re.UNICODE): the flag lands in ``count`` (= 32)
    return _PERIOD_STRIP.sub("", out, count=int(re.UNICODE))


def lmms_process(answer: str) -> str:
    """lmms-eval ``mcq_acc.process``: ``^[A-E]\\.`` first, else the first standalone letter A-E after cleaning."""
    match = _OPTION_RE.match(answer.strip())
    if match:
        return match.group(1).upper()
    answer = answer.replace("\n", " ").replace("\t", " ").strip()
    answer = _process_punctuation(answer)
    answer = answer.strip("'").strip('"').strip(")").strip("(").strip().lower()
    letter = re.search(r"\b([A-E])\b", answer, re.IGNORECASE)
    if letter:
        return letter.group(1).upper()
    return answer


def mcq_acc(answer: str, pred: str) -> int:
    """lmms-eval ``mcq_acc(answer, pred)``: both sides go through ``process`` and must be equal."""
    return int(lmms_process(pred) == lmms_process(answer))


@PARSERS.register("lmms_mcq_acc")
def lmms_mcq_acc(response: Optional[str], gold: str) -> int:
    """lmms-eval MVBench scorer (lenient: a stray word "a" in a verbose answer can match as "A")."""
    if response is None:
        return 0
    return mcq_acc(gold, response)


# --- OVO-Bench offline scorer ------------------------------------------------------------------------------------
@PARSERS.register("ovo_mcq")
def ovo_mcq(response: Any, gold: str) -> int:
    """OVO backward/real-time: ``int(gt in response)``, a substring test ("B. A man" is correct for gold A too).

    A list response (as in the official Qwen2-VL results) gets Python's element test, as in the original.
    """
    if response is None:
        return 0
    return int(gold in response)


@PARSERS.register("ovo_rec")
def ovo_rec(response: Optional[str], gold: Any) -> int:
    """OVO REC: join every digit run of the response and compare with ``str(count)`` ("1 or 2" -> "12")."""
    if response is None:
        return 0
    if not isinstance(response, str):
        raise DataError(f"REC response must be a string, got {type(response).__name__} (the official regex crashes)")
    return int("".join(re.findall(r"\d+", response)) == str(gold))


@PARSERS.register("ovo_yes_no")
def ovo_yes_no(response: Any, gold: int) -> int:
    """OVO SSR/CRR: exactly "N"/"Y" for type 0/1 is correct; else ``"No"``/``"Yes"`` substring, case-sensitive.

    So "no" is wrong, and "Not sure" contains "No" and is correct for type 0.
    """
    if response is None:
        return 0
    if (response == "N" and gold == 0) or (response == "Y" and gold == 1):
        return 1
    return int(("No" if gold == 0 else "Yes") in response)


_STRICT_RE = re.compile(r"^\(?([A-Z])(?:\)|\.|:|$|\s)")


@PARSERS.register("strict_letter")
def strict_letter(response: Optional[str], gold: str) -> int:
    """Strict cross-check: the stripped response starts with the gold letter alone (``A``, ``(A)``, ``A.``)."""
    if response is None:
        return 0
    match = _STRICT_RE.match(response.strip())
    return int(bool(match) and match.group(1) == gold)


def score_answer(parser: str, response: Any, gold: Any, post: Any = None, as_list: bool = False) -> int:
    """Score one response with the parser named ``parser``.

    ``post`` (a ``ResponseDef``: ``strip``, ``first_line_only``, ``prefix``) post-processes a string response
    first; ``as_list`` wraps it in a one-element list, as the official OVO Qwen2-VL wrapper saves
    ``batch_decode``'s output (then ``gt in response`` is an exact element match).
    """
    if post is not None:
        response = postprocess(response, post.strip, post.first_line_only, post.prefix)
    if as_list and isinstance(response, str):
        response = [response]
    return int(PARSERS.get(parser)(response, gold))
