"""A real OpenAIServingChat, built through __init__ on CPU: the tokenizer
manager and template manager are fakes with a character tokenizer, and the
runtime context's model/serving config is a namespace (no server is started).

Prompt ids: one id per character of "<role>content" per message, so a user
message of n characters makes a prompt of n + 6 ids.
"""

from __future__ import annotations

from types import SimpleNamespace

ROLE_OVERHEAD = len("<user>")


class CharTokenizer:
    chat_template = None
    bos_token_id = None

    def encode(self, text, **_):
        return [ord(char) % 50 for char in text]

    def decode(self, ids, **_):
        return "".join(chr(65 + i % 26) for i in ids)

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=True, return_dict=False, **_):
        text = "".join(f"<{message['role']}>{message['content']}" for message in messages)
        return self.encode(text) if tokenize else text


class _TemplateManager(SimpleNamespace):
    """No chat template of its own: every other setting reads as unset."""

    def __getattr__(self, name):
        return None


def serving_chat(monkeypatch, *, context_length: int = 128, allow_auto_truncate: bool = False,
                 default_chat_template_kwargs=None):
    """The chat serving layer as the HTTP server builds it, on fakes."""
    from sglang.srt.entrypoints.openai import serving_chat as module

    serving = SimpleNamespace(default_chat_template_kwargs=default_chat_template_kwargs,
                              allow_auto_truncate=allow_auto_truncate, trust_request_chat_template=False,
                              return_input_ids=False, return_output_ids=False, enable_cache_report=False,
                              incremental_streaming_output=False)
    monkeypatch.setattr(module, "get_serving", lambda: serving)
    monkeypatch.setattr(module, "get_model", lambda: SimpleNamespace(context_length=context_length, revision=None))
    hf_config = SimpleNamespace(model_type="llama", architectures=["LlamaForCausalLM"])
    tokenizer_manager = SimpleNamespace(
        server_args=None, tokenizer=CharTokenizer(), model_path="m", served_model_name="m",
        model_config=SimpleNamespace(is_multimodal=False, get_default_sampling_params=lambda: {}, hf_config=hf_config),
        config_value=lambda name: None)
    template_manager = _TemplateManager(chat_template_name=None, python_chat_template=None, reasoning_config=None,
                                        jinja_template_content_format="string",
                                        jinja_template_may_reorder_tool_results=False)
    return module.OpenAIServingChat(tokenizer_manager, template_manager)


def chat_request(content: str = "hi", **fields):
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": content}], **fields)
