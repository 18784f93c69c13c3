"""The scripted provider's text: plausible, deterministic, and shaped by its prompt.

``compose(system_prompt, user_text, stream)`` reads what the prompt asks for — "three bullet
points", "in N steps", notes or facts with sources, JSON, one word, one sentence, a poem or a
haiku, a summary, a support reply, an announcement — and writes that shape about the topic
words of the messages (falling back to a short explanation). Every choice is drawn from
``stream``, a SHA-256 stream seeded by the request hash, so the text is a pure function of
the request: the same request gives the same bytes on every machine and Python version, and
any change to the request gives another text.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence

NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "a single": 1, "single": 1}
_STOP_WORDS = """a an and are as at be been being but by can could did do does doing for
from had has have how i if in into is it its me more most my no not of on or our out over
please so some such than that the their them then there these they this those through to too
under up very was we were what when where which while who why will with would you your about
after again all also any because before between both each few just only other same should
own now here work works thing things write explain answer research rewrite reply
describe summarise summarize list plan piece goal notes note give make tell using based use one two three four five six
seven eight nine ten short brief clear friendly careful key facts sources source words word line
lines sentence sentences bullet bullets points point steps step exactly json terse poem
haiku rhyme announce review draft ticket task part combine both into split say them kind
your yours yes vote votes decide decision weigh compare check improve thoroughly today
this that these those twice every said editor revise requested"""
STOP = frozenset(_STOP_WORDS.split())
VERBS = ("helps", "shapes", "depends on", "changes", "drives", "protects", "explains",
         "affects", "supports", "limits", "improves", "reduces")
OBJECTS = ("the overall result", "what happens next", "the main risk", "how people respond",
           "the long-term outcome", "the cost over time", "the first response",
           "the final decision", "the order of the steps", "the level of trust")
QUALIFIERS = ("in most cases", "over a few weeks", "when it is done early", "for most teams",
              "according to the evidence", "with few side effects", "if the plan is followed",
              "for the people involved", "at a modest cost", "once it is measured")
OPENERS = ("In short,", "Put simply,", "In practice,", "Most importantly,", "Overall,",
           "As a rule,", "Above all,")
SOURCES = ("WHO fact sheet", "CDC overview", "a 2021 review", "the product brief",
           "the support history", "the internal wiki", "a field study", "the vendor's docs")
STEP_VERBS = ("Check", "Compare", "Confirm", "Record", "Review", "Estimate", "Contact", "Update")
IMAGES = ("quiet", "morning", "light", "river", "steady", "small", "bright", "slow", "open",
          "careful", "distant", "warm")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")
_OWN = frozenset(w.lower() for phrase in (*VERBS, *OBJECTS, *QUALIFIERS, *OPENERS, *SOURCES,
                                          *IMAGES, *STEP_VERBS, "notes on", "announcing",
                                          "summary", "hi there", "best regards support")
                 for w in re.findall(r"[A-Za-z]+", phrase)) | frozenset(
    verb.split(" ")[0].removesuffix("s") for verb in VERBS)
"""Words the writer itself uses: never taken for topic words (a reply that quotes an earlier
answer keeps the earlier topic, not its filler)."""


class Stream:
    """Deterministic choices from a SHA-256 chain (independent of Python's ``random``)."""

    def __init__(self, seed: bytes) -> None:
        self._block = hashlib.sha256(seed).digest()
        self._used = 0

    def number(self, below: int) -> int:
        if self._used + 4 > len(self._block):
            self._block, self._used = hashlib.sha256(self._block).digest(), 0
        value = int.from_bytes(self._block[self._used:self._used + 4], "big")
        self._used += 4
        return value % max(1, below)

    def pick(self, options: Sequence[str]) -> str:
        return options[self.number(len(options))]


_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9'+-]*[A-Za-z0-9]|[A-Za-z]")
_CHUNKS = re.compile(r"[^\w\s'+-]|\n|\.\s")


def _content(word: str) -> bool:
    lower = word.lower()
    parts = lower.split("-")
    return len(word) >= 3 and lower not in STOP and not all(p in _OWN for p in parts)


def _named(word: str, first: bool) -> bool:
    """A name: inner capitals (``SQLite``) or a capital not starting its sentence."""
    inner = any(c.isupper() for c in word[1:]) and not word.isupper()
    return inner or (word[0].isupper() and not word.isupper() and not first)


def _phrases(text: str) -> dict[str, bool]:
    phrases: dict[str, bool] = {}
    for chunk in _CHUNKS.split(re.sub(r"\([^)]*\)", " ", text)):
        words = _TOKEN.findall(chunk)
        run: list[tuple[str, bool]] = []
        for i, word in enumerate([*words, ""]):
            if word and _content(word) and len(run) < 2:
                run.append((word, _named(word, i == 0)))
                continue
            if run:
                named = any(flag for _, flag in run)
                phrase = " ".join(w if named else w.lower() for w, _ in run)
                phrases.setdefault(phrase, named)
            run = [(word, _named(word, i == 0))] if word and _content(word) else []
    return phrases


def topic_words(*texts: str) -> list[str]:
    """Topic phrases of the first text that has any (the user's text before the system
    prompt): runs of up to two content words, names (``SQLite``) first, then by appearance;
    parenthesised asides (sources) are left out."""
    for text in texts:
        phrases = _phrases(text)
        if phrases:
            return sorted(phrases, key=lambda p: not phrases[p])
    return ["the topic"]


def asked_count(prompt: str, nouns: str) -> int | None:
    """``3`` for "three bullet points" / "3 bullets" / "in 3 short steps"."""
    words = "|".join(sorted(NUMBERS, key=len, reverse=True))
    found = re.search(rf"\b(\d+|{words})\s+(?:\w+\s+){{0,2}}(?:{nouns})", prompt, re.I)
    if not found:
        return None
    raw = found.group(1).lower()
    return max(1, min(12, int(raw) if raw.isdigit() else NUMBERS[raw]))


def agree(verb: str, subject: str) -> str:
    """``helps`` → ``help`` after a plural subject (``vaccines help``)."""
    last = subject.split(" ")[-1]
    if last.endswith("s") and not last.endswith(("ss", "us", "is")):
        first, _, rest = verb.partition(" ")
        return (first[:-1] + (" " + rest if rest else "")) if first.endswith("s") else verb
    return verb


class Writer:
    def __init__(self, topics: list[str], stream: Stream) -> None:
        self.topics, self.s = topics, stream

    def topic(self) -> str:
        """The main topic half of the time, another one otherwise."""
        if len(self.topics) == 1 or self.s.number(2) == 0:
            return self.topics[0]
        return self.s.pick(self.topics[1:6])

    def sentence(self, opener: bool = False) -> str:
        head = f"{self.s.pick(OPENERS)} " if opener else ""
        subject = self.topic()
        body = (f"{subject} {agree(self.s.pick(VERBS), subject)} {self.s.pick(OBJECTS)} "
                f"{self.s.pick(QUALIFIERS)}.")
        text = head + body
        return text[0].upper() + text[1:]

    def paragraph(self, sentences: int) -> str:
        return " ".join(self.sentence(opener=i == 0 or self.s.number(3) == 0)
                        for i in range(sentences))

    def bullets(self, count: int) -> str:
        return "\n".join(f"- {self.sentence()}" for _ in range(count))

    def steps(self, count: int) -> str:
        return "\n".join(f"{i}. {self.s.pick(STEP_VERBS)} {self.topic()} "
                         f"{self.s.pick(QUALIFIERS)}." for i in range(1, count + 1))

    def notes(self, count: int) -> str:
        lines = [f"Notes on {self.topics[0]}:"]
        lines += [f"- {self.sentence()[:-1]} (source: {self.s.pick(SOURCES)})."
                  for _ in range(count)]
        return "\n".join(lines)

    def poem(self, lines: int, words: int) -> str:
        out = []
        for i in range(lines):
            images = [self.s.pick(IMAGES) for _ in range(words - 1 + self.s.number(2))]
            line = " ".join([self.topic(), *images] if i % 2 == 0 else [*images, self.topic()])
            out.append(line[0].upper() + line[1:])
        return "\n".join(out)

    def json(self) -> str:
        return json.dumps({"summary": self.sentence(),
                           "points": [self.sentence() for _ in range(2 + self.s.number(2))],
                           "confidence": round(0.55 + self.s.number(40) / 100, 2)})


Shape = tuple[str, Callable[[str, Writer], str | None]]


def _count_shape(nouns: str, render: Callable[[Writer, int], str], *,
                 present: str) -> Callable[[str, Writer], str | None]:
    """A shape asked for with a count ("three bullet points"), or by name alone (``present``:
    "as bullets" gets three to five)."""
    def shape(prompt: str, w: Writer) -> str | None:
        count = asked_count(prompt, nouns)
        if count is None and not re.search(rf"\b(?:{present})\b", prompt, re.I):
            return None
        return render(w, count if count is not None else 3 + w.s.number(3))
    return shape


def _words(prompt: str, w: Writer) -> str | None:
    count = asked_count(prompt, "words?")
    if count is None or count > 6:
        return None
    words = [w.topic() for _ in range(count)]
    return " ".join(words).capitalize() + "."


def _one_sentence(prompt: str, w: Writer) -> str | None:
    if re.search(r"\b(one|single|a) (?:short )?(sentence|line|note)\b|\bterse\b|\bbrief\b"
                 r"|\bone-liner", prompt, re.I):
        return w.sentence(opener=w.s.number(2) == 0)
    count = asked_count(prompt, "sentences?")
    return None if count is None else w.paragraph(count)


SHAPES: tuple[Callable[[str, Writer], str | None], ...] = (
    lambda p, w: w.json() if re.search(r"\bjson\b", p, re.I) else None,
    lambda p, w: w.poem(3, 3) if re.search(r"\bhaiku\b", p, re.I) else None,
    lambda p, w: w.poem(4 + w.s.number(3), 4) if re.search(r"\b(poem|rhyme|verse)", p, re.I)
    else None,
    _words,
    _count_shape(r"bullet(?: point)?s?|points", lambda w, n: w.bullets(n),
                 present=r"bullets?"),
    _count_shape(r"steps?|parts?|stages?", lambda w, n: w.steps(n), present=r"steps"),
    _one_sentence,
    lambda p, w: w.notes(3 + w.s.number(3)) if re.search(
        r"\b(notes|list|extract|key facts|claims|research)\b", p, re.I) else None,
    lambda p, w: f"Summary: {w.paragraph(2)}" if re.search(r"\bsummar", p, re.I) else None,
    lambda p, w: (f"Hi there,\n\n{w.paragraph(2)}\n\nBest regards,\nSupport")
    if re.search(r"\b(support|reply to)\b", p, re.I) else None,
    lambda p, w: f"Announcing {w.topics[0]}: {w.paragraph(2)}"
    if re.search(r"\bannounc", p, re.I) else None,
)


def _shaped(prompts: Sequence[str], writer: Writer) -> str | None:
    for prompt in prompts:
        for shape in SHAPES:
            text = shape(prompt, writer)
            if text is not None:
                return text
    return None


def compose(system_prompt: str, user_text: str, stream: Stream, *, max_words: int) -> str:
    """The answer to a request with this system prompt and user text (see the module doc).

    The system prompt's instructions win; then the user text's first and last lines (where
    instructions sit: "Announce: …", "… Write the piece."), never quoted material between.
    """
    writer = Writer(topic_words(user_text, system_prompt), stream)
    lines = [line for line in user_text.strip().splitlines() if line.strip()]
    text = _shaped([system_prompt, *lines[:1], *lines[-1:]], writer)
    if text is None:
        text = writer.paragraph(2 + stream.number(3))
    words = text.split(" ")
    return text if len(words) <= max_words else " ".join(words[:max_words]).rstrip(",") + "…"
