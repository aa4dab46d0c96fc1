"""Chat templates of the Qwen VL families, as the Instruct checkpoints render a conversation.

- Qwen2-VL / Qwen2.5-VL (the Jinja string shipped with the Qwen2.5-VL-Instruct checkpoints): a default system turn
  ``You are a helpful assistant.`` when the conversation has none; an image or a video is
  ``<|vision_start|><|image_pad|><|vision_end|>`` / ``<|vision_start|><|video_pad|><|vision_end|>``.
- Qwen3-VL (the Qwen3-VL-Instruct checkpoints' rendering): NO default system turn; the same media placeholders (the
  processor expands a video into timestamped frame-pair blocks, ``mmrl.rollout.vllm_inputs``); a ``tool`` message is
  a user turn holding ``<tool_response>\\n...\\n</tool_response>`` (consecutive tool messages share one turn).
  The tools-schema system header of the checkpoints is not reproduced: mmrl writes its own tool list into the system
  turn (``agent_loop_multi``).
"""

QWEN_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

QWEN3_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% set ns = namespace(body='') %}"
    "{% if message['content'] is string %}{% set ns.body = message['content'] %}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}{% set ns.body = ns.body + 'Picture ' + image_count.value|string + ': ' %}{% endif %}"
    "{% set ns.body = ns.body + '<|vision_start|><|image_pad|><|vision_end|>' %}"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}{% set ns.body = ns.body + 'Video ' + video_count.value|string + ': ' %}{% endif %}"
    "{% set ns.body = ns.body + '<|vision_start|><|video_pad|><|vision_end|>' %}"
    "{% elif 'text' in content %}{% set ns.body = ns.body + content['text'] %}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if message['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "\n<tool_response>\n{{ ns.body }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>\n{% endif %}"
    "{% else %}<|im_start|>{{ message['role'] }}\n{{ ns.body }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chat_template_for(family: str) -> str:
    """The chat template of a model family (``qwen2_vl``, ``qwen2_5_vl``, ``qwen3_vl``, ``qwen3_vl_moe``)."""
    return QWEN3_VL_CHAT_TEMPLATE if family.startswith("qwen3_vl") else QWEN_VL_CHAT_TEMPLATE
