#!/usr/bin/env python3
"""Writes the request bodies and the fixed upstream responses of bench/perf.

  gen_fixtures.py OUT_DIR

Request bodies (what wrk POSTs):
  body-1k.json    /v1/completions, 1,024-token prompt   (4 KiB of prompt text)
  body-32k.json   /v1/completions, 32,768-token prompt  (128 KiB)
  body-128k.json  /v1/completions, 131,072-token prompt (512 KiB)
  body-chat.json  /v1/chat/completions, stream: true, 1,024-token user message

Upstream responses (served by the upstream nginx as static files, chosen by
the request header X-Bench-Response that every proxy forwards unchanged):
  json-1k.json, json-32k.json, json-128k.json  a vLLM-shaped completion whose
      usage says the whole prompt was a prefix-cache hit (prompt_tokens =
      cached_tokens = the prompt's tokens at 4 bytes per token), so kvroute's
      shadow index and bytes-per-token model stay consistent with what it
      estimated and a warm index stays warm.
  sse-1.sse, sse-256.sse  a vLLM-shaped chat stream with 1 or 256 content
      events, then a usage event (stream_options.include_usage) and [DONE].
  health.json, metrics.txt  for kvroute's health checks and gauge scrapes.

Prompts are deterministic pseudo-random words with a JSON-escaped newline
every ~60 words, so the JSON parsers have escapes to decode.
"""
import json
import os
import random
import sys

MODEL = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
WORDS = ("the of and to in is that for it as with was on be at by this had not are but from "
         "or have an they which one you were her all she there would their we him been has "
         "when who will more no if out so said what up its about into than them can only other "
         "new some could time these two may then do first any my now such like our over man me "
         "even most made after also did many before must through back years where much your way "
         "kernel tensor cache prefill decode token routing latency batch").split()


def prompt_text(nbytes, seed):
    """Exactly `nbytes` bytes of text (after JSON decoding)."""
    rng = random.Random(seed)
    out, size, n = [], 0, 0
    while size < nbytes:
        w = rng.choice(WORDS)
        n += 1
        sep = "\n" if n % 60 == 0 else " "
        piece = w + sep
        out.append(piece)
        size += len(piece)
    return "".join(out)[:nbytes]


def completion_json(prompt_tokens):
    return {
        "id": "cmpl-bench0000000000000000000000000",
        "object": "text_completion",
        "created": 1767225600,
        "model": MODEL,
        "choices": [{"index": 0, "text": " The answer is forty-two, as computed above.",
                     "logprobs": None, "finish_reason": "length", "stop_reason": None,
                     "prompt_logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + 16,
                  "completion_tokens": 16,
                  "prompt_tokens_details": {"cached_tokens": prompt_tokens}},
        "kv_transfer_params": None,
    }


def sse_stream(events, prompt_tokens):
    lines = []
    base = {"id": "chatcmpl-bench00000000000000000000000", "object": "chat.completion.chunk",
            "created": 1767225600, "model": MODEL}
    first = dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                 "logprobs": None, "finish_reason": None}])
    lines.append(first)
    for i in range(events - 1):
        lines.append(dict(base, choices=[{"index": 0, "delta": {"content": f" tok{i % 97}"},
                                          "logprobs": None, "finish_reason": None}]))
    lines.append(dict(base, choices=[], usage={
        "prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + events,
        "completion_tokens": events, "prompt_tokens_details": {"cached_tokens": prompt_tokens}}))
    text = "".join(f"data: {json.dumps(e, separators=(',', ':'))}\n\n" for e in lines)
    return text + "data: [DONE]\n\n"


METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="%s"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="%s"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="%s"} 0.1
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="262144"} 1.0
""" % (MODEL, MODEL, MODEL)


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, tokens in (("1k", 1024), ("32k", 32768), ("128k", 131072)):
        body = {"model": MODEL, "prompt": prompt_text(tokens * 4, seed=tokens),
                "max_tokens": 16, "temperature": 0}
        write(os.path.join(out, f"body-{name}.json"), json.dumps(body))
        write(os.path.join(out, f"json-{name}.json"),
              json.dumps(completion_json(tokens), separators=(",", ":")))
    chat = {"model": MODEL, "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": 256, "temperature": 0,
            "messages": [{"role": "user", "content": prompt_text(4096, seed=7)}]}
    write(os.path.join(out, "body-chat.json"), json.dumps(chat))
    for events in (1, 256):
        write(os.path.join(out, f"sse-{events}.sse"), sse_stream(events, 1026))
    write(os.path.join(out, "health.json"), "{}\n")
    write(os.path.join(out, "metrics.txt"), METRICS)


if __name__ == "__main__":
    main()
