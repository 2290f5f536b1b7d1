"""The `openai` Python SDK (a real client, not written here) against `penstock serve` on the embedded model:
completions, chat, streaming, log-probabilities, errors. Skips with a clear message when the package is not installed."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from serverlib import Server, reexec_in_tools_venv  # noqa: E402

try:
    import openai
except ImportError:  # pragma: no cover
    reexec_in_tools_venv()  # tools/setup.sh installs the SDK into a venv (PEP 668); does not return when there is one
    openai = None


@unittest.skipIf(openai is None, "the openai package is not installed (pip install openai); skipping SDK tests")
class OpenAISdk(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--api-key", "sk-test")
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.srv.port}/v1", api_key="sk-test", max_retries=0)

    @classmethod
    def tearDownClass(cls):
        assert cls.srv.stop() == 0

    def test_models(self):
        ids = [m.id for m in self.client.models.list()]
        self.assertEqual(ids, ["tiny-deepseek-v3"])

    def test_completion(self):
        r = self.client.completions.create(model="tiny-deepseek-v3", prompt="Hello", max_tokens=5, temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertIn(r.choices[0].finish_reason, ("length", "stop"))
        self.assertLessEqual(r.usage.completion_tokens, 5)
        self.assertGreater(r.usage.prompt_tokens, 0)

    def test_chat(self):
        r = self.client.chat.completions.create(model="tiny-deepseek-v3", max_tokens=4, seed=3,
                                                messages=[{"role": "system", "content": "be brief"},
                                                          {"role": "user", "content": "hi"}])
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIsInstance(r.choices[0].message.content, str)

    def test_streaming(self):
        stream = self.client.chat.completions.create(model="tiny-deepseek-v3", max_tokens=6, stream=True,
                                                     messages=[{"role": "user", "content": "count"}],
                                                     stream_options={"include_usage": True})
        chunks = list(stream)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(len(finishes), 1)
        self.assertIsNotNone(chunks[-1].usage)
        text = "".join(c.choices[0].text for c in self.client.completions.create(
            model="tiny-deepseek-v3", prompt="a b c", max_tokens=5, stream=True, temperature=0))
        full = self.client.completions.create(model="tiny-deepseek-v3", prompt="a b c", max_tokens=5, temperature=0)
        self.assertEqual(text, full.choices[0].text)

    def test_logprobs(self):
        """The SDK's typed logprob objects parse the server's: chat content entries and completions' lists."""
        r = self.client.chat.completions.create(model="tiny-deepseek-v3", max_tokens=4, temperature=0, logprobs=True,
                                                top_logprobs=2, messages=[{"role": "user", "content": "hi"}])
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        for e in content:
            self.assertIsInstance(e.logprob, float)
            self.assertEqual(e.bytes, list(e.token.encode()))
            self.assertEqual(len(e.top_logprobs), 2)
            self.assertEqual(e.top_logprobs[0].logprob, e.logprob)  # greedy: the chosen token is the top one
        c = self.client.completions.create(model="tiny-deepseek-v3", prompt="Hello", max_tokens=3, temperature=0,
                                           logprobs=1)
        lp = c.choices[0].logprobs
        self.assertEqual(len(lp.token_logprobs), c.usage.completion_tokens)
        self.assertEqual(len(lp.top_logprobs), len(lp.tokens))
        stream = self.client.chat.completions.create(model="tiny-deepseek-v3", max_tokens=4, temperature=0,
                                                     logprobs=True, stream=True,
                                                     messages=[{"role": "user", "content": "hi"}])
        streamed = [e for ch in stream if ch.choices and ch.choices[0].logprobs
                    for e in ch.choices[0].logprobs.content]
        self.assertEqual([e.logprob for e in streamed], [e.logprob for e in content])

    def test_echo_scores_the_prompt(self):
        """lm-eval style scoring: echo, logprobs and max_tokens 0 give the prompt back with its tokens' values."""
        c = self.client.completions.create(model="tiny-deepseek-v3", prompt="The cat sat", max_tokens=0, echo=True,
                                           logprobs=1)
        lp = c.choices[0].logprobs
        self.assertEqual(c.choices[0].text, "The cat sat")
        self.assertEqual(c.usage.completion_tokens, 0)
        self.assertEqual(len(lp.tokens), c.usage.prompt_tokens)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertTrue(all(v <= 0 for v in lp.token_logprobs[1:]))

    def test_n_and_prompt_batches(self):
        """n choices per prompt and a batch of prompts come back as indexed choices (as lm-eval batches requests)."""
        c = self.client.completions.create(model="tiny-deepseek-v3", prompt=["Hello", "Bye"], max_tokens=2, n=2,
                                           temperature=0)
        self.assertEqual([x.index for x in c.choices], [0, 1, 2, 3])
        self.assertEqual(c.choices[0].text, c.choices[1].text)  # greedy: the two choices of one prompt agree
        self.assertEqual(c.usage.completion_tokens, 8)
        r = self.client.chat.completions.create(model="tiny-deepseek-v3", max_tokens=3, n=3, seed=1,
                                                messages=[{"role": "user", "content": "hi"}])
        self.assertEqual(len(r.choices), 3)

    def test_sampling_controls(self):
        """The SDK's penalty and bias parameters reach the sampler: +100 on a token makes greedy pick it."""
        c = self.client.completions.create(model="tiny-deepseek-v3", prompt="Hello", max_tokens=3, temperature=0,
                                           logit_bias={"17": 100}, frequency_penalty=0.5, presence_penalty=0.5)
        self.assertEqual(c.usage.completion_tokens, 3)
        r = self.client.chat.completions.create(model="tiny-deepseek-v3", max_tokens=3, temperature=0.7, seed=2,
                                                frequency_penalty=1.0, messages=[{"role": "user", "content": "hi"}])
        self.assertEqual(r.choices[0].finish_reason in ("length", "stop"), True)
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="m", prompt="x", frequency_penalty=3.0)

    def test_errors(self):
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="m", prompt="x", max_tokens=0)
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="m", prompt="x", n=2, best_of=3)
        bad = openai.OpenAI(base_url=f"http://127.0.0.1:{self.srv.port}/v1", api_key="wrong", max_retries=0)
        with self.assertRaises(openai.AuthenticationError):
            bad.models.list()
        # The embedded model's template writes no tool calls: tools are refused, naming the setting that helps.
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
        self.assertIn("--tool-call-parser", str(e.exception))


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


@unittest.skipIf(openai is None, "the openai package is not installed (pip install openai); skipping SDK tests")
class OpenAISdkTools(unittest.TestCase):
    """A server told its model's tool-call format (--tool-call-parser deepseekv3) takes the SDK's tools, a tool
    result in the history, and streams; the tiny model writes no call, so its text is the content
    (tests/server/api_tools_test.cc parses real markup)."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--tool-call-parser", "deepseekv3")
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.srv.port}/v1", api_key="x", max_retries=0)

    @classmethod
    def tearDownClass(cls):
        assert cls.srv.stop() == 0

    def test_tools(self):
        info = json.loads(self.srv.request("GET", "/get_server_info")[2])
        self.assertEqual(info["tool_call_parser"], "deepseekv3")
        msgs = [{"role": "user", "content": "weather in Tokyo?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Tokyo\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
        r = self.client.chat.completions.create(model="m", messages=msgs, tools=TOOLS, max_tokens=6, temperature=0)
        self.assertIn(r.choices[0].finish_reason, ("length", "stop", "tool_calls"))
        self.assertIsInstance(r.choices[0].message.content, str)
        chunks = list(self.client.chat.completions.create(model="m", messages=msgs, tools=TOOLS, max_tokens=6,
                                                          temperature=0, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, r.choices[0].message.content)
        with self.assertRaises(openai.BadRequestError):
            self.client.chat.completions.create(model="m", messages=msgs, tools=TOOLS, tool_choice="required")

    def test_reasoning_content(self):
        """--reasoning-parser deepseek-r1: the prompt opened the reasoning, and the tiny model never closes it, so all
        of its text is reasoning_content, whole and streamed; separate_reasoning false gives it back as content."""
        srv = Server("--reasoning-parser", "deepseek-r1")
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="x", max_retries=0)
            msgs = [{"role": "user", "content": "think"}]
            r = client.chat.completions.create(model="m", messages=msgs, max_tokens=6, temperature=0)
            reasoning = r.choices[0].message.reasoning_content
            self.assertIsInstance(reasoning, str)
            self.assertGreater(len(reasoning), 0)
            self.assertEqual(r.choices[0].message.content, "")
            chunks = list(client.chat.completions.create(model="m", messages=msgs, max_tokens=6, temperature=0,
                                                         stream=True))
            streamed = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or ""
                               for c in chunks if c.choices)
            self.assertEqual(streamed, reasoning)
            plain = client.chat.completions.create(model="m", messages=msgs, max_tokens=6, temperature=0,
                                                   extra_body={"separate_reasoning": False})
            self.assertEqual(plain.choices[0].message.content, reasoning)
        finally:
            self.assertEqual(srv.stop(), 0)


if __name__ == "__main__":
    if openai is None:
        print("*** the openai package is not installed (tools/setup.sh installs it); SKIPPING the SDK tests ***")
    unittest.main(verbosity=2)
