"""The official openai Python client against serve-llama (CPU path): chat and completions, streamed and not; the
greedy (and seeded) text equals run-llama's for the same prompt; usage counts; stop strings; KV reuse of a resent
chat history; the context-length and API-key errors as the client raises them.

usage: openai_client_test.py SERVE_LLAMA RUN_LLAMA SOURCE_DIR   (the default model; LLM_SERVER_TEST_SMALL_MODEL=1:
stories260K only, for the sanitized tree)
"""
import sys

import openai

from server_util import STORIES, Results, Server, run_llama, small_model

serve, runl, src = sys.argv[1:4]
small = small_model()
MODEL = STORIES if small else []
PROMPT = "Once upon a time" if small else "The capital of France is"
QUESTION = "What is the capital of France?"
N = 16


def client(srv, key="none"):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key=key, max_retries=0, timeout=300)


def completion_text(c, **kw):
    r = c.completions.create(model="any", prompt=PROMPT, max_tokens=N, **kw)
    return r.choices[0].text, r


def streamed_completion(c, **kw):
    text, finish, usage = "", None, None
    for chunk in c.completions.create(model="any", prompt=PROMPT, max_tokens=N, stream=True,
                                      stream_options={"include_usage": True}, **kw):
        if chunk.usage:
            usage = chunk.usage
        if chunk.choices:
            text += chunk.choices[0].text
            finish = chunk.choices[0].finish_reason or finish
    return text, finish, usage


def check_completions(c):
    want = run_llama(runl, MODEL + ["--prompt", PROMPT, "-n", str(N), "--temp", "0"], src)
    assert want.startswith(PROMPT) and want.endswith("\n"), repr(want)
    want = want[len(PROMPT):-1]
    text, r = completion_text(c, temperature=0)
    assert text == want, "server %r != run-llama %r" % (text, want)
    assert r.object == "text_completion" and r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.completion_tokens <= N and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    if r.choices[0].finish_reason == "length":
        assert r.usage.completion_tokens == N
    s_text, s_finish, s_usage = streamed_completion(c, temperature=0)
    assert s_text == want, "streamed %r != %r" % (s_text, want)
    assert s_finish == r.choices[0].finish_reason and s_usage.completion_tokens == r.usage.completion_tokens
    assert s_usage.prompt_tokens == r.usage.prompt_tokens
    # Stop strings: the text is cut before the first one, which is not returned, and the reason is "stop".
    word = want.split()[2] if len(want.split()) > 2 else want.strip()
    cut, r2 = completion_text(c, temperature=0, stop=[word, "\u00a7never"])
    assert cut == want[:want.index(word)] and r2.choices[0].finish_reason == "stop", (cut, word)
    s_cut, s_finish, _ = streamed_completion(c, temperature=0, stop=word)
    assert s_cut == cut and s_finish == "stop", (s_cut, cut)


def check_seeded(c):
    # Sampling with a seed: the same text as run-llama's with the same seed and sampler settings, twice.
    want = run_llama(runl, MODEL + ["--prompt", PROMPT, "-n", str(N), "--temp", "0.8", "--top-k", "40",
                                    "--top-p", "0.95", "--seed", "7"], src)[len(PROMPT):-1]
    for _ in range(2):
        text, _ = completion_text(c, temperature=0.8, top_p=0.95, seed=7, extra_body={"top_k": 40})
        assert text == want, "seeded %r != run-llama %r" % (text, want)


def check_chat(c):
    want = run_llama(runl, MODEL + ["--chat", "-n", str(N), "--temp", "0"], src, stdin=QUESTION + "\n")
    assert want.endswith("\n")
    want = want[:-1]
    msgs = [{"role": "user", "content": QUESTION}]
    r = c.chat.completions.create(model="any", messages=msgs, max_tokens=N, temperature=0)
    m = r.choices[0].message
    assert m.role == "assistant" and m.content == want, "server %r != run-llama %r" % (m.content, want)
    assert r.object == "chat.completion" and r.usage.completion_tokens <= N
    text, roles, finish, usage = "", [], None, None
    for chunk in c.chat.completions.create(model="any", messages=msgs, max_tokens=N, temperature=0, stream=True,
                                           stream_options={"include_usage": True}):
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            roles += [ch.delta.role] if ch.delta.role else []
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    assert roles == ["assistant"] and text == want and finish == r.choices[0].finish_reason, (roles, text, finish)
    assert usage.prompt_tokens == r.usage.prompt_tokens and usage.completion_tokens == r.usage.completion_tokens
    # The history resent with a new turn: its prefix is already in the KV cache, and the answer is the one a server
    # with nothing cached gives (the CPU reference prefills token by token, so reuse is exact).
    history = msgs + [{"role": "assistant", "content": m.content}, {"role": "user", "content": "And of Germany?"}]
    r2 = c.chat.completions.create(model="any", messages=history, max_tokens=N, temperature=0)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert cached >= r.usage.prompt_tokens - 1, "only %d prompt tokens reused" % cached
    c.completions.create(model="any", prompt="Zebras", max_tokens=2, temperature=0)  # evicts the history
    r3 = c.chat.completions.create(model="any", messages=history, max_tokens=N, temperature=0)
    evicted = r3.usage.prompt_tokens_details.cached_tokens
    assert evicted < cached // 2, "%d of the history still cached after another prompt" % evicted
    assert r3.choices[0].message.content == r2.choices[0].message.content


def check_models_and_errors(c):
    ids = [m.id for m in c.models.list().data]
    assert len(ids) == 1 and ids[0], ids
    try:
        c.completions.create(model="any", prompt="hello " * 9000, max_tokens=4)
        raise AssertionError("a prompt longer than the context was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.code == "context_length_exceeded", e
    try:
        c.chat.completions.create(model="any", messages=[{"role": "user", "content": "x"}], temperature=5)
        raise AssertionError("temperature 5 was accepted")
    except openai.BadRequestError as e:
        assert e.param == "temperature", e


def check_api_key():
    srv = Server(serve, STORIES + ["--api-key", "sekrit"], src)
    try:
        try:
            client(srv, "wrong").models.list()
            raise AssertionError("a wrong key was accepted")
        except openai.AuthenticationError as e:
            assert e.status_code == 401 and e.code == "invalid_api_key", e
        r = client(srv, "sekrit").completions.create(model="x", prompt="Once", max_tokens=3, temperature=0)
        assert r.usage.completion_tokens >= 1
    finally:
        srv.stop()


def main():
    print("openai %s, %s" % (openai.__version__, "stories260K" if small else "the default model"), flush=True)
    res = Results()
    srv = Server(serve, MODEL, src)
    c = client(srv)
    try:
        res.run("completions greedy == run-llama, streamed and not, stop strings", check_completions, c)
        res.run("completions seeded == run-llama", check_seeded, c)
        res.run("chat greedy == run-llama --chat, streamed and not, KV reuse of a resent history", check_chat, c)
        res.run("models list, context-length and range errors", check_models_and_errors, c)
    finally:
        srv.stop()
    res.run("api key: 401 for a wrong key, answers with the right one", check_api_key)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
