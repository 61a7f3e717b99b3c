"""classifier.usage reads what a model call used from the real SDKs' response objects and errors,
and from their JSON, counting cached input tokens inside the input as OpenTelemetry does."""

from __future__ import annotations

import anthropic
import httpx
import openai
from anthropic.types import Message
from openai.types.chat import ChatCompletion

from classifier.envelope import error_envelope
from classifier.usage import usage_of


def test_an_openai_completion_gives_its_tokens_its_cached_tokens_and_its_model():
    completion = ChatCompletion.model_validate(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o-2024-08-06",
            "choices": [],
            "usage": {
                "prompt_tokens": 100,
                "completion_tokens": 20,
                "total_tokens": 120,
                "prompt_tokens_details": {"cached_tokens": 30},
            },
        }
    )
    assert usage_of(completion) == {
        "input_tokens": 100,
        "output_tokens": 20,
        "cached_tokens": 30,
        "model": "gpt-4o-2024-08-06",
    }


def test_anthropics_cache_counts_are_added_to_its_input():
    message = Message.model_validate(
        {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4",
            "content": [],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 50,
                "output_tokens": 7,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 10,
            },
        }
    )
    assert usage_of(message) == {
        "input_tokens": 160,
        "output_tokens": 7,
        "cached_tokens": 100,
        "model": "claude-sonnet-4",
    }


def test_geminis_json_is_read_too():
    data = {
        "usageMetadata": {
            "promptTokenCount": 9,
            "candidatesTokenCount": 2,
            "cachedContentTokenCount": 3,
        },
        "modelVersion": "gemini-2.0-flash",
    }
    assert usage_of(data) == {
        "input_tokens": 9,
        "output_tokens": 2,
        "cached_tokens": 3,
        "model": "gemini-2.0-flash",
    }


def test_an_error_whose_body_says_its_usage_puts_it_in_the_envelope():
    request = httpx.Request("POST", "https://api.anthropic.com/v1/messages")
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    body["usage"] = {"input_tokens": 40, "output_tokens": 0}
    error = anthropic.InternalServerError(
        "Overloaded", response=httpx.Response(529, request=request), body=body
    )
    envelope = error_envelope(error)
    assert envelope["failure_type"] == "server_fault"
    assert envelope["usage"] == {"input_tokens": 40, "output_tokens": 0}


def test_nothing_said_is_no_usage_and_no_envelope_key():
    request = httpx.Request("POST", "https://api.openai.com/v1/chat/completions")
    error = openai.APITimeoutError(request=request)
    assert usage_of(error) is None and "usage" not in error_envelope(error)
    assert usage_of({"usage": {"total_tokens": 5}}) is None  # no input or output count
    assert usage_of({"usage": {"prompt_tokens": True, "completion_tokens": -1}}) is None
