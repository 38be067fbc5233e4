"""The offline default of Search-QA: a generated encyclopedia of invented entities.

Nothing in it exists, so a model cannot answer from memory: it has to search. The world
is a small typed graph --

============  =====================================================================
entity        relations stated in its passage
============  =====================================================================
country       capital (a city), continent, currency
city          country, founding year
person        birth year, birth city, occupation, university; employer (some);
              spouse (some)
university    city, founding year
company       founder (a person), founding year, headquarters (a city)
book          author (a person), year, genre
film          director (a person), year, shooting city (a distractor)
band          city of formation, year, lead singer (a person)
river         country, length
============  =====================================================================

-- written as one short encyclopedic passage per entity in Search-R1's corpus layout
(``{"id": "17", "contents": "\\"Title\\"\\ntext"}``). Passages name the entities they
relate to, but person and city passages do not link back (a city does not list who was
born there), so a two-hop question needs two searches.

Questions come from templates over the graph: single-hop ("Who wrote *Blue Harbour*?")
and two-hop bridge questions ("In which city was the author of *Blue Harbour* born?",
subject passage -> bridge entity -> answer passage). Every answer is a unique entity
name or a year; ``metadata`` records the hop count, the relation path, the supporting
passage ids (in hop order) and the entity chain.

Everything is drawn from one ``np.random.Generator(seed)``: the same seed gives the same
knowledge base (for a given NumPy version).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentgym.searchqa import kb_vocabulary as words
from agentgym.searchqa.data import QAItem
from retrieval.base import Document

KB_VERSION = 1
"""Bumped whenever generation changes, so cached files of older versions are not reused."""

DATA_SOURCE = "generated_kb"

DEFAULT_COUNTS: dict[str, int] = {
    "country": 40,
    "city": 400,
    "person": 1900,
    "university": 200,
    "company": 500,
    "book": 900,
    "film": 700,
    "band": 300,
    "river": 160,
}
"""Entities per type (one passage each): 5,100 passages."""

DEFAULT_QUESTIONS_PER_TEMPLATE = 130
"""Questions drawn per template: 2,509 questions for seed 0 (20 templates; "What is the
capital of X?" runs out at 40 countries, and a two-hop draw whose answer happens to be in
the subject's passage is dropped)."""

TEST_FRACTION = 0.2
"""Share of questions in the ``"test"`` split; the rest are ``"train"``."""


@dataclass
class Entity:
    """A node of the generated world: its type, unique name and relations."""

    kind: str
    name: str
    index: int
    facts: dict[str, Any] = field(default_factory=dict)
    passage_id: str = ""
    text: str = ""


@dataclass(frozen=True)
class KnowledgeBase:
    """A generated knowledge base: passages (the corpus) and questions over them.

    Attributes:
        seed: the generator seed.
        passages: one :class:`~retrieval.base.Document` per entity, ids ``"0"``, ``"1"``, ...
        questions: :class:`~agentgym.searchqa.data.QAItem` with ``data_source="generated_kb"``.
    """

    seed: int
    passages: tuple[Document, ...]
    questions: tuple[QAItem, ...]


class _Names:
    """Unique invented names from syllables, drawn from one generator."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.used: set[str] = set()

    def _pick(self, options: tuple[str, ...]) -> str:
        return options[int(self.rng.integers(len(options)))]

    def stem(self, syllables: int) -> str:
        parts = [self._pick(words.ONSETS) + self._pick(words.VOWELS) for _ in range(syllables)]
        return "".join(parts) + self._pick(words.CODAS)

    def unique(self, make: Callable[[], str]) -> str:
        for _ in range(10_000):
            name = make()
            if name.lower() not in self.used:
                self.used.add(name.lower())
                return name
        raise RuntimeError("could not draw a unique name; the vocabulary is too small")

    def given_name(self) -> str:
        return self.stem(int(self.rng.integers(1, 3))).capitalize()

    def surname(self) -> str:
        return (
            self.stem(int(self.rng.integers(1, 3))) + self._pick(words.SURNAME_ENDINGS)
        ).capitalize()

    def place(self) -> str:
        return (
            self.stem(int(self.rng.integers(1, 3))) + self._pick(words.PLACE_ENDINGS)
        ).capitalize()

    def country(self) -> str:
        return (
            self.stem(int(self.rng.integers(1, 3))) + self._pick(words.COUNTRY_ENDINGS)
        ).capitalize()


LAST_YEAR = 2024
"""No generated event happens after this year."""


def _year_before(year: int) -> int:
    return min(year, LAST_YEAR)


def _institution(name: str) -> str:
    """``"the University of X"`` but ``"X College"`` inside a sentence."""
    return f"the {name}" if name.startswith("University of") else name


def _choice(rng: np.random.Generator, options: tuple[str, ...] | list[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


def _build_world(rng: np.random.Generator, counts: dict[str, int]) -> dict[str, list[Entity]]:
    names = _Names(rng)
    world: dict[str, list[Entity]] = {k: [] for k in DEFAULT_COUNTS}

    def add(kind: str, name: str, **facts: Any) -> Entity:
        entity = Entity(kind, name, len(world[kind]), dict(facts))
        world[kind].append(entity)
        return entity

    for _ in range(counts["country"]):
        add(
            "country",
            names.unique(names.country),
            continent=_choice(rng, words.CONTINENTS),
            currency=_choice(rng, words.CURRENCIES),
            population=int(rng.integers(2, 90)),
        )
    countries = world["country"]
    for i in range(counts["city"]):
        # Every country gets at least one city (its capital), then the rest at random.
        country = countries[i] if i < len(countries) else _choice(rng, countries)
        add(
            "city",
            names.unique(names.place),
            country=country,
            founded=int(rng.integers(800, 1900)),
            population=int(rng.integers(5, 2000)) * 1000,
        )
    for country in countries:
        country.facts["capital"] = world["city"][country.index]
    cities = world["city"]
    for _ in range(counts["university"]):
        city = _choice(rng, cities)
        style = int(rng.integers(3))
        named_after_city = (f"University of {city.name}", f"{city.name} Institute of Technology")
        if style < 2 and named_after_city[style].lower() not in names.used:
            make = lambda n=named_after_city[style]: n  # noqa: E731
        else:
            make = lambda: f"{names.place()} College"  # noqa: E731
        add(
            "university",
            names.unique(make),
            city=city,
            founded=int(rng.integers(1200, 1990)),
            students=int(rng.integers(2, 60)) * 1000,
            field=_choice(rng, words.FIELDS),
        )
    universities = world["university"]
    surnames = [names.unique(names.surname) for _ in range(counts["person"] // 3)]
    for _ in range(counts["person"]):
        # Surnames are shared by about three people each: a realistic retrieval distractor.
        make = lambda: f"{names.given_name()} {_choice(rng, surnames)}"  # noqa: E731
        add(
            "person",
            names.unique(make),
            birth_year=int(rng.integers(1890, 1996)),
            birth_city=_choice(rng, cities),
            occupation=_choice(rng, words.OCCUPATIONS),
            university=_choice(rng, universities),
        )
    people = world["person"]
    married = 2 * (len(people) // 6)
    for a, b in rng.permutation(len(people))[:married].reshape(-1, 2):
        people[int(a)].facts["spouse"] = people[int(b)]
        people[int(b)].facts["spouse"] = people[int(a)]

    def role(occupation: str) -> list[Entity]:
        return [p for p in people if p.facts["occupation"] == occupation]

    founders = rng.permutation(len(people))[: counts["company"]]
    for founder_index in founders:
        founder = people[int(founder_index)]
        make = lambda: f"{names.place()} {_choice(rng, words.COMPANY_WORDS)}"  # noqa: E731
        company = add(
            "company",
            names.unique(make),
            founder=founder,
            founded=_year_before(founder.facts["birth_year"] + int(rng.integers(20, 50))),
            city=_choice(rng, cities),
            industry=_choice(rng, words.INDUSTRIES),
            employees=int(rng.integers(1, 500)) * 100,
        )
        founder.facts.setdefault("founded", company)
    companies = world["company"]
    for person in people:
        if person.facts["occupation"] in ("engineer", "chemist", "economist", "physicist"):
            employer = _choice(rng, companies)
            if rng.random() < 0.7 and employer.facts["founder"] is not person:
                person.facts["employer"] = employer
    writers = role("novelist") + role("poet")
    for _ in range(counts["book"]):
        make = lambda: f"The {_choice(rng, words.ADJECTIVES)} {_choice(rng, words.NOUNS)}"  # noqa: E731
        if rng.random() < 0.4:
            make = lambda: f"{_choice(rng, words.NOUNS)} of {names.place()}"  # noqa: E731
        author = _choice(rng, writers)
        add(
            "book",
            names.unique(make),
            author=author,
            genre=_choice(rng, words.BOOK_GENRES),
            year=_year_before(author.facts["birth_year"] + int(rng.integers(20, 60))),
        )
    directors = role("film director")
    for _ in range(counts["film"]):
        make = lambda: f"{_choice(rng, words.ADJECTIVES)} {_choice(rng, words.NOUNS)}"  # noqa: E731
        if rng.random() < 0.5:
            make = lambda: f"{names.given_name()} and the {_choice(rng, words.NOUNS)}"  # noqa: E731
        director = _choice(rng, directors)
        add(
            "film",
            names.unique(make),
            director=director,
            genre=_choice(rng, words.FILM_GENRES),
            year=_year_before(director.facts["birth_year"] + int(rng.integers(22, 60))),
            shot_in=_choice(rng, cities),
        )
    singers = role("singer")
    singer_order = rng.permutation(len(singers))
    for i in range(counts["band"]):
        make = lambda: f"The {_choice(rng, words.ADJECTIVES)} {_choice(rng, words.BAND_NOUNS)}"  # noqa: E731
        singer = singers[int(singer_order[i % len(singers)])]
        add(
            "band",
            names.unique(make),
            city=_choice(rng, cities),
            singer=singer,
            genre=_choice(rng, words.MUSIC_GENRES),
            year=_year_before(singer.facts["birth_year"] + int(rng.integers(17, 35))),
        )
    for _ in range(counts["river"]):
        make = lambda: f"{names.place()} River"  # noqa: E731
        add(
            "river",
            names.unique(make),
            country=_choice(rng, countries),
            length=int(rng.integers(40, 3000)),
            mouth=_choice(rng, words.SEAS),
        )
    return world


# ----------------------------------------------------------------------------- passages
def _person_text(p: Entity, rng: np.random.Generator) -> str:
    f = p.facts
    surname = p.name.split()[-1]
    article = "an" if f["occupation"][0] in "aeiou" else "a"
    parts = [
        f"{p.name} (born {f['birth_year']}) is {article} {f['occupation']}.",
        _choice(
            rng,
            (
                f"{surname} was born in {f['birth_city'].name} and studied at {_institution(f['university'].name)}.",
                f"Born in {f['birth_city'].name}, {surname} attended {_institution(f['university'].name)}.",
            ),
        ),
    ]
    if "employer" in f:
        parts.append(f"{surname} worked for {f['employer'].name} for many years.")
    if "founded" in f:
        parts.append(f"In {f['founded'].facts['founded']}, {surname} founded {f['founded'].name}.")
    if "spouse" in f:
        parts.append(f"{surname} is married to {f['spouse'].name}.")
    return " ".join(parts)


def _passage_text(e: Entity, rng: np.random.Generator) -> str:
    f = e.facts
    if e.kind == "country":
        return (
            f"{e.name} is a country in {f['continent']}. Its capital is {f['capital'].name}. "
            f"It has about {f['population']} million inhabitants and its currency is the "
            f"{e.name.lower()} {f['currency']}."
        )
    if e.kind == "city":
        return (
            f"{e.name} is a city in {f['country'].name} with a population of "
            f"{f['population']:,}. It was first recorded in {f['founded']}."
        )
    if e.kind == "person":
        return _person_text(e, rng)
    if e.kind == "university":
        return (
            f"{e.name} is a university in {f['city'].name}, founded in {f['founded']}. "
            f"It has about {f['students']:,} students and is known for its faculty of "
            f"{f['field']}."
        )
    if e.kind == "company":
        return (
            f"{e.name} is a {f['industry']} company founded in {f['founded']} by "
            f"{f['founder'].name}. It is headquartered in {f['city'].name} and employs "
            f"about {f['employees']:,} people."
        )
    if e.kind == "book":
        return f"{e.name} is a {f['year']} {f['genre']} by {f['author'].name}. " + _choice(
            rng,
            (
                "It was well received by critics.",
                "It sold poorly at first but later became a classic.",
                "It was translated into several languages.",
            ),
        )
    if e.kind == "film":
        return (
            f"{e.name} is a {f['year']} {f['genre']} film directed by "
            f"{f['director'].name}. It was shot on location in {f['shot_in'].name}."
        )
    if e.kind == "band":
        article = "an" if f["genre"][0] in "aeiou" else "a"
        return (
            f"{e.name} are {article} {f['genre']} band formed in {f['city'].name} in {f['year']}. "
            f"The band's lead singer is {f['singer'].name}."
        )
    if e.kind == "river":
        return (
            f"The {e.name} is a river in {f['country'].name}. It is {f['length']:,} km "
            f"long and flows into {f['mouth']}."
        )
    raise ValueError(f"unknown entity kind {e.kind!r}")


# ----------------------------------------------------------------------------- questions
@dataclass(frozen=True)
class _Template:
    """A question template: subject kind, question text and the path to the answer."""

    name: str
    kind: str
    question: str
    path: tuple[str, ...]
    answer: Callable[[Any], str] = str


def _year(value: Any) -> str:
    return str(value)


def _name(value: Any) -> str:
    return value.name


TEMPLATES: tuple[_Template, ...] = (
    _Template("person.birth_city", "person", "In which city was {s} born?", ("birth_city",), _name),
    _Template("person.birth_year", "person", "In what year was {s} born?", ("birth_year",), _year),
    _Template(
        "person.university", "person", "Which university did {s} attend?", ("university",), _name
    ),
    _Template("city.country", "city", "In which country is the city of {s}?", ("country",), _name),
    _Template("country.capital", "country", "What is the capital of {s}?", ("capital",), _name),
    _Template("company.founder", "company", "Who founded {s}?", ("founder",), _name),
    _Template("company.city", "company", "In which city is {s} headquartered?", ("city",), _name),
    _Template("book.author", "book", "Who wrote {s}?", ("author",), _name),
    _Template("film.director", "film", "Who directed the film {s}?", ("director",), _name),
    _Template("band.singer", "band", "Who is the lead singer of {s}?", ("singer",), _name),
    _Template(
        "university.founded", "university", "In what year was {s} founded?", ("founded",), _year
    ),
    _Template("river.country", "river", "In which country is the {s}?", ("country",), _name),
    _Template(
        "book.author.birth_city",
        "book",
        "In which city was the author of {s} born?",
        ("author", "birth_city"),
        _name,
    ),
    _Template(
        "film.director.birth_year",
        "film",
        "In what year was the director of {s} born?",
        ("director", "birth_year"),
        _year,
    ),
    _Template(
        "person.birth_city.country",
        "person",
        "In which country is the city where {s} was born?",
        ("birth_city", "country"),
        _name,
    ),
    _Template(
        "company.city.country",
        "company",
        "In which country is {s} headquartered?",
        ("city", "country"),
        _name,
    ),
    _Template(
        "company.founder.university",
        "company",
        "Which university did the founder of {s} attend?",
        ("founder", "university"),
        _name,
    ),
    _Template(
        "band.singer.birth_city",
        "band",
        "In which city was the lead singer of {s} born?",
        ("singer", "birth_city"),
        _name,
    ),
    _Template(
        "person.spouse.birth_year",
        "person",
        "In what year was the spouse of {s} born?",
        ("spouse", "birth_year"),
        _year,
    ),
    _Template(
        "person.employer.founder",
        "person",
        "Who founded the company that {s} worked for?",
        ("employer", "founder"),
        _name,
    ),
)
"""12 single-hop and 8 two-hop question templates."""


def _questions(
    world: dict[str, list[Entity]], rng: np.random.Generator, per_template: int
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for template in TEMPLATES:
        candidates = [e for e in world[template.kind] if template.path[0] in e.facts]
        order = rng.permutation(len(candidates))
        for position in order[:per_template]:
            subject = candidates[int(position)]
            chain: list[Entity] = [subject]
            value: Any = subject
            usable = True
            for relation in template.path:
                if not isinstance(value, Entity) or relation not in value.facts:
                    usable = False
                    break
                value = value.facts[relation]
                if isinstance(value, Entity):
                    chain.append(value)
            answer = template.answer(value)
            # A question must need every hop: the answer is in the last passage read and,
            # for two hops, not already in the subject's passage (a chance coincidence,
            # such as a spouse born in the same year, would let one search suffice).
            if not usable or answer not in chain[len(template.path) - 1].text:
                continue
            if len(template.path) > 1 and answer in subject.text:
                continue
            # Passages that must be read: the subject's, then each bridge entity's.
            hops = len(template.path)
            supporting = [c.passage_id for c in chain[:hops]]
            rows.append(
                {
                    "question": template.question.format(s=subject.name),
                    "golden_answers": [answer],
                    "template": template.name,
                    "hops": hops,
                    "supporting_ids": supporting,
                    "entities": [c.name for c in chain],
                }
            )
    return rows


def generate_knowledge_base(
    seed: int = 0,
    *,
    counts: dict[str, int] | None = None,
    questions_per_template: int = DEFAULT_QUESTIONS_PER_TEMPLATE,
) -> KnowledgeBase:
    """Generate the knowledge base for ``seed`` (pure: writes nothing).

    Args:
        seed: seed of the ``np.random.Generator`` everything is drawn from.
        counts: entities per type (default :data:`DEFAULT_COUNTS`, 5,100 passages).
        questions_per_template: questions drawn per template (default 130: 2,509 questions).

    Returns:
        The passages (ids ``"0"``...) and questions (ids ``"kb-00000"``..., split
        ``"train"`` or ``"test"``, metadata with ``template``, ``hops``,
        ``supporting_ids`` and ``entities``).
    """
    counts = {**DEFAULT_COUNTS, **(counts or {})}
    if counts["country"] < 1 or counts["city"] < counts["country"]:
        raise ValueError("need at least one country and at least as many cities as countries")
    rng = np.random.default_rng(seed)
    world = _build_world(rng, counts)
    passages: list[Document] = []
    for kind in DEFAULT_COUNTS:
        for entity in world[kind]:
            entity.passage_id = str(len(passages))
            entity.text = _passage_text(entity, rng)
            passages.append(Document(entity.passage_id, f'"{entity.name}"\n{entity.text}'))
    rows = _questions(world, rng, questions_per_template)
    order = rng.permutation(len(rows))
    test_count = int(round(len(rows) * TEST_FRACTION))
    test_rows = {int(i) for i in order[:test_count]}
    questions = tuple(
        QAItem(
            id=f"kb-{i:05d}",
            question=row["question"],
            golden_answers=tuple(row["golden_answers"]),
            data_source=DATA_SOURCE,
            split="test" if i in test_rows else "train",
            metadata={k: row[k] for k in ("template", "hops", "supporting_ids", "entities")},
        )
        for i, row in enumerate(rows)
    )
    return KnowledgeBase(seed=seed, passages=tuple(passages), questions=questions)
