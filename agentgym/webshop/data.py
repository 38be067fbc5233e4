"""WebShop's product data: the schema, the loaders and WebShop's normalization.

Three on-disk forms are read (all from princeton-nlp/WebShop):

* raw products ``items_shuffle*.json`` -- a JSON list of scraped Amazon records (``asin``,
  ``name``, ``full_description``, ``small_description``, ``pricing`` as a string such as
  ``"$19.99 - $27.99"``, ``customization_options``, ``product_category``, ``category``,
  ``query``, ``images``, ...), normalized here exactly as WebShop's ``load_products`` does;
* the processed JSONL form ``documents.jsonl`` written by WebShop's search-engine
  converter: one ``{"id", "contents", "product"}`` line per product, where ``product`` is
  already normalized (``Title``, ``Description``, ``BulletPoints``, ``pricing`` as floats,
  ``Price``, ``options``, ``Attributes``, ...), possibly with the product's human
  ``instructions``;
* the attribute file ``items_ins_v2*.json`` (``asin -> {"attributes", "instruction"?,
  "instruction_attributes"?}``: the synthetic instructions) and the human instructions
  ``items_human_ins*.json`` (``asin -> [{"instruction", "instruction_attributes",
  "instruction_options", ...}]``). An optional reviews file (``items_reviews*.json``: a
  list of ``{"asin", "reviews", "average_rating"}``) fills ratings and reviews.

WebShop's normalization of a raw record: skip ``asin == "nan"`` or longer than 10
characters and duplicate ASINs; ``Title = name``; ``Description = full_description``;
``BulletPoints = small_description`` (a lone string becomes a one-element list);
``pricing`` = the dollar amounts found in the price string (the first two kept), ``[100.0]``
when there is none, and the tag ``"$a"`` or ``"$a to $b"``; option names lowercased and
option values stripped, lowercased, with ``"/"`` written ``" | "``; ``Attributes`` from the
attribute file or ``["DUMMY_ATTR"]`` when the ASIN has none there; ``query`` lowercased and
stripped.

Malformed files raise :class:`WebShopDataError` naming the file and the record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from types import MappingProxyType
from typing import Any

DUMMY_ATTRIBUTE = "DUMMY_ATTR"
"""WebShop's placeholder for products missing from the attribute file."""
DEFAULT_PRICE = 100.0
"""WebShop's price for products without one."""
MAX_ASIN_LENGTH = 10


class WebShopDataError(ValueError):
    """A WebShop data file is missing, unreadable or does not have WebShop's schema."""


@dataclass(frozen=True)
class Review:
    """One customer review (``title``, star ``score``, ``body``)."""

    title: str
    score: float
    body: str


@dataclass(frozen=True)
class Product:
    """One normalized product, WebShop's processed fields under snake-case names.

    Attributes:
        asin: the product id (10 characters, e.g. ``"B07DJJXGB5"``).
        title: ``Title`` (= the raw ``name``), shown on pages and used by the type reward.
        description: ``Description`` (may be empty).
        bullet_points: ``BulletPoints`` (the "Features" sub-page).
        pricing: one price or a ``(low, high)`` range, in dollars.
        price_tag: ``Price`` as shown, ``"$19.99"`` or ``"$19.99 to $27.99"``.
        options: option name -> its values, lowercased (``{"color": ("black", ...)}``).
        attributes: ``Attributes`` from the attribute file.
        category: WebShop's top category (``"beauty"``, ``"fashion"``, ...).
        query: the search query the product was scraped under (lowercased).
        product_category: the Amazon category path, levels joined by ``" › "``.
        rating: ``Rating`` as shown (``"N.A."`` when unknown).
        reviews: the reviews shown on the "Reviews" sub-page.
        main_image: ``MainImage`` URL (kept for completeness; never rendered in text).
    """

    asin: str
    title: str
    description: str
    bullet_points: tuple[str, ...]
    pricing: tuple[float, ...]
    price_tag: str
    options: Mapping[str, tuple[str, ...]]
    attributes: tuple[str, ...]
    category: str
    query: str
    product_category: str
    rating: str = "N.A."
    reviews: tuple[Review, ...] = ()
    main_image: str = ""

    def search_text(self) -> str:
        """The text WebShop indexes: title, description, first bullet and option text.

        Lowercased; options written ``"name: v1, v2, and name2: w1"`` as WebShop's
        ``convert_product_file_format`` does.
        """
        option_text = ", and ".join(
            f"{name}: {', '.join(values)}" for name, values in self.options.items()
        )
        first_bullet = self.bullet_points[0] if self.bullet_points else ""
        return " ".join([self.title, self.description, first_bullet, option_text]).lower()


@dataclass(frozen=True)
class SyntheticInstruction:
    """A product's synthetic instruction from the attribute file (``human_goals=False``)."""

    text: str
    attributes: tuple[str, ...]


@dataclass(frozen=True)
class HumanInstruction:
    """One human-written instruction (a record of ``items_human_ins.json``)."""

    text: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]


@dataclass(frozen=True)
class Catalog:
    """A read-only product catalog with its instructions.

    Attributes:
        products: every product, in file order (WebShop's order matters for goal order).
        synthetic_instructions: ASIN -> the synthetic instruction (products that have one).
        human_instructions: ASIN -> its human instructions, in file order.
        source: a short description of where the data came from (for messages and repr).
    """

    products: tuple[Product, ...]
    synthetic_instructions: Mapping[str, SyntheticInstruction]
    human_instructions: Mapping[str, tuple[HumanInstruction, ...]]
    source: str
    by_asin: Mapping[str, Product] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "by_asin", MappingProxyType({p.asin: p for p in self.products})
        )

    def __len__(self) -> int:
        return len(self.products)


@dataclass(frozen=True)
class WebShopFiles:
    """Paths of one WebShop data set; only ``products`` is required.

    ``products`` is either the raw ``items_shuffle*.json`` or a processed ``*.jsonl``.
    """

    products: Path
    attributes: Path | None = None
    human_instructions: Path | None = None
    reviews: Path | None = None

    @classmethod
    def find(cls, directory: str | Path) -> WebShopFiles:
        """Find WebShop's files in ``directory`` by their usual names.

        Products: ``items_shuffle*.json``, else a ``*.jsonl`` whose name contains
        ``documents`` (else the only ``*.jsonl``). Attributes: ``items_ins_v2*.json``.
        Human instructions: ``items_human_ins*.json``. Reviews: ``items_reviews*.json``.

        Raises:
            WebShopDataError: no product file, or several candidates for one role.
        """
        root = Path(directory)
        if not root.is_dir():
            raise WebShopDataError(f"WebShop data directory not found: {root}")
        products = _pick(root, "items_shuffle*.json", "raw products")
        if products is None:
            jsonl = sorted(root.glob("*.jsonl"))
            documents = [p for p in jsonl if "documents" in p.name]
            products = _only(documents or jsonl, root, "processed products (*.jsonl)")
        if products is None:
            raise WebShopDataError(
                f"no WebShop product file in {root}: expected items_shuffle*.json or a "
                "processed documents*.jsonl"
            )
        return cls(
            products=products,
            attributes=_pick(root, "items_ins_v2*.json", "attributes"),
            human_instructions=_pick(root, "items_human_ins*.json", "human instructions"),
            reviews=_pick(root, "items_reviews*.json", "reviews"),
        )


def _pick(root: Path, pattern: str, role: str) -> Path | None:
    return _only(sorted(root.glob(pattern)), root, role)


def _only(paths: Sequence[Path], root: Path, role: str) -> Path | None:
    if len(paths) > 1:
        names = ", ".join(p.name for p in paths)
        raise WebShopDataError(
            f"several {role} files in {root} ({names}); pass WebShopFiles explicitly"
        )
    return paths[0] if paths else None


# ---------------------------------------------------------------------------- loading
def load_catalog(
    files: WebShopFiles | str | Path, *, num_products: int | None = None
) -> Catalog:
    """Load and normalize a WebShop data set.

    Args:
        files: a :class:`WebShopFiles`, a directory holding WebShop's files, or the path
            of a product file (raw ``.json`` or processed ``.jsonl``) alone.
        num_products: keep only the first ``num_products`` records of the product file
            (WebShop's ``num_products``; its files are pre-shuffled).

    Returns:
        The catalog. Synthetic instructions come from the attribute file; human ones from
        the human-instruction file and from processed records' ``instructions``.

    Raises:
        WebShopDataError: a file is missing, is not valid JSON, or a record lacks a field.
    """
    if not isinstance(files, WebShopFiles):
        path = Path(files)
        files = WebShopFiles.find(path) if path.is_dir() else WebShopFiles(products=path)
    if num_products is not None and num_products < 1:
        raise ValueError(f"num_products must be >= 1 or None, got {num_products}")
    attributes = _read_attributes(files.attributes) if files.attributes else {}
    human = _read_human_instructions(files.human_instructions) if files.human_instructions else {}
    reviews = _read_reviews(files.reviews) if files.reviews else {}

    suffix = files.products.suffix.lower()
    if suffix == ".jsonl":
        records = _iter_jsonl(files.products)
        raw = False
    elif suffix == ".json":
        records = iter(_read_json(files.products, list))
        raw = True
    else:
        raise WebShopDataError(
            f"{files.products}: expected a raw .json product list or a processed .jsonl"
        )

    products: list[Product] = []
    seen: set[str] = set()
    for index, record in enumerate(records):
        if num_products is not None and index >= num_products:
            break
        where = f"{files.products} record {index}"
        if raw:
            product = normalize_raw_product(record, attributes, reviews, where=where)
        else:
            product, embedded = _product_from_document(record, attributes, where=where)
            if product is not None and embedded:
                human.setdefault(product.asin, embedded)
        if product is None or product.asin in seen:
            continue
        seen.add(product.asin)
        products.append(product)
    if not products:
        raise WebShopDataError(f"{files.products}: no products")

    synthetic = {}
    for product in products:
        entry = attributes.get(product.asin, {})
        text = entry.get("instruction")
        if text:
            synthetic[product.asin] = SyntheticInstruction(
                text=str(text),
                attributes=tuple(str(a) for a in entry.get("instruction_attributes") or ()),
            )
    human_kept = {p.asin: human[p.asin] for p in products if p.asin in human}
    return Catalog(
        products=tuple(products),
        synthetic_instructions=MappingProxyType(synthetic),
        human_instructions=MappingProxyType(human_kept),
        source=str(files.products),
    )


def normalize_raw_product(
    record: Mapping[str, Any],
    attributes: Mapping[str, Mapping[str, Any]] | None = None,
    reviews: Mapping[str, tuple[tuple[Review, ...], str]] | None = None,
    *,
    where: str = "product",
) -> Product | None:
    """Normalize one raw ``items_shuffle`` record as WebShop's ``load_products`` does.

    Args:
        record: the raw record (not modified).
        attributes: the attribute file's content (``asin -> {"attributes": [...]}``).
        reviews: ``asin -> (reviews, rating)`` from the reviews file.
        where: names the record in error messages.

    Returns:
        The product, or ``None`` for records WebShop skips (``asin`` ``"nan"`` or longer
        than 10 characters).
    """
    if not isinstance(record, Mapping):
        raise WebShopDataError(f"{where}: expected an object, got {type(record).__name__}")
    asin = str(_field(record, "asin", where))
    if asin == "nan" or len(asin) > MAX_ASIN_LENGTH:
        return None
    where = f"{where} ({asin})"
    pricing, price_tag = parse_raw_pricing(record.get("pricing"), where=where)
    small = record.get("small_description")
    bullets = small if isinstance(small, list) else [small if small is not None else ""]
    entry = (attributes or {}).get(asin)
    product_attributes = (
        tuple(entry["attributes"]) if entry and "attributes" in entry else (DUMMY_ATTRIBUTE,)
    )
    product_reviews, rating = (reviews or {}).get(asin, ((), "N.A."))
    images = record.get("images") or [""]
    return Product(
        asin=asin,
        title=str(_field(record, "name", where)),
        description=str(record.get("full_description") or ""),
        bullet_points=tuple(str(b) for b in bullets),
        pricing=pricing,
        price_tag=price_tag,
        options=normalize_options(record.get("customization_options"), where=where),
        attributes=tuple(str(a) for a in product_attributes),
        category=str(_field(record, "category", where)),
        query=str(_field(record, "query", where)).lower().strip(),
        product_category=str(record.get("product_category") or ""),
        rating=rating,
        reviews=product_reviews,
        main_image=str(images[0] or ""),
    )


def parse_raw_pricing(pricing: Any, *, where: str = "product") -> tuple[tuple[float, ...], str]:
    """WebShop's price parsing: ``"$19.99 - $27.99"`` -> ``((19.99, 27.99), "$19.99 to $27.99")``.

    Every ``$``-separated chunk becomes a number (non-digits dropped); the first two are
    kept. A missing or empty price is ``[100.0]`` with the tag ``"$100.0"``.
    """
    if pricing is None or not pricing:
        return (DEFAULT_PRICE,), f"${DEFAULT_PRICE}"
    if not isinstance(pricing, str):
        raise WebShopDataError(f"{where}: raw 'pricing' must be a string, got {pricing!r}")
    try:
        amounts = [float(Decimal(re.sub(r"[^\d.]", "", chunk))) for chunk in pricing.split("$")[1:]]
    except InvalidOperation as error:
        raise WebShopDataError(f"{where}: cannot parse price {pricing!r}") from error
    if not amounts:
        raise WebShopDataError(f"{where}: no dollar amount in price {pricing!r}")
    if len(amounts) == 1:
        return (amounts[0],), f"${amounts[0]}"
    return (amounts[0], amounts[1]), f"${amounts[0]} to ${amounts[1]}"


def normalize_option_value(value: str) -> str:
    """WebShop's option value: stripped, ``"/"`` written ``" | "``, lowercased."""
    return value.strip().replace("/", " | ").lower()


def normalize_options(
    customization_options: Any, *, where: str = "product"
) -> Mapping[str, tuple[str, ...]]:
    """Raw ``customization_options`` -> ``{lowercased name: normalized values}``."""
    if not customization_options:
        return MappingProxyType({})
    if not isinstance(customization_options, Mapping):
        raise WebShopDataError(f"{where}: 'customization_options' must be an object")
    options: dict[str, tuple[str, ...]] = {}
    for name, contents in customization_options.items():
        if contents is None:
            continue
        try:
            values = tuple(normalize_option_value(str(c["value"])) for c in contents)
        except (KeyError, TypeError) as error:
            raise WebShopDataError(f"{where}: malformed option {name!r}") from error
        options[str(name).lower()] = values
    return MappingProxyType(options)


def _product_from_document(
    record: Any, attributes: Mapping[str, Mapping[str, Any]], *, where: str
) -> tuple[Product | None, tuple[HumanInstruction, ...]]:
    """A processed ``documents.jsonl`` line -> the product and its embedded instructions."""
    if not isinstance(record, Mapping) or not isinstance(record.get("product"), Mapping):
        raise WebShopDataError(f"{where}: expected {{'id', 'contents', 'product': {{...}}}}")
    item = record["product"]
    asin = str(item.get("asin") or record.get("id") or "")
    if not asin:
        raise WebShopDataError(f"{where}: product without 'asin'")
    if asin == "nan" or len(asin) > MAX_ASIN_LENGTH:
        return None, ()
    where = f"{where} ({asin})"
    pricing = item.get("pricing")
    if not isinstance(pricing, list) or not pricing:
        raise WebShopDataError(f"{where}: processed 'pricing' must be a non-empty list")
    raw_options = item.get("options") or {}
    if not isinstance(raw_options, Mapping):
        raise WebShopDataError(f"{where}: 'options' must be an object")
    if asin in attributes and "attributes" in attributes[asin]:
        product_attributes = attributes[asin]["attributes"]
    else:
        product_attributes = item.get("Attributes") or []
    bullets = item.get("BulletPoints", [])
    product = Product(
        asin=asin,
        title=str(_field(item, "Title", where)),
        description=str(item.get("Description") or ""),
        bullet_points=tuple(str(b) for b in (bullets if isinstance(bullets, list) else [bullets])),
        pricing=tuple(float(p) for p in pricing[:2]),
        price_tag=str(_field(item, "Price", where)),
        options=MappingProxyType(
            {str(k): tuple(str(v) for v in vs) for k, vs in raw_options.items()}
        ),
        attributes=tuple(str(a) for a in product_attributes),
        category=str(_field(item, "category", where)),
        query=str(_field(item, "query", where)).lower().strip(),
        product_category=str(item.get("product_category") or ""),
        rating=str(item.get("Rating", "N.A.")),
        reviews=_parse_reviews(item.get("Reviews") or [], where=where),
        main_image=str(item.get("MainImage") or ""),
    )
    embedded = _parse_human_records(item.get("instructions") or [], where=where)
    return product, embedded


def _field(record: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in record or record[key] is None:
        raise WebShopDataError(f"{where}: missing field {key!r}")
    return record[key]


def _read_json(path: Path, expected: type) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
    except FileNotFoundError as error:
        raise WebShopDataError(f"WebShop data file not found: {path}") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise WebShopDataError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(content, expected):
        raise WebShopDataError(f"{path}: expected a JSON {expected.__name__}")
    return content


def _iter_jsonl(path: Path) -> Iterator[Any]:
    if not path.is_file():
        raise WebShopDataError(f"WebShop data file not found: {path}")
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as error:
                raise WebShopDataError(f"{path} line {line_number}: not valid JSON") from error


def _read_attributes(path: Path) -> dict[str, dict[str, Any]]:
    content = _read_json(path, dict)
    for asin, entry in content.items():
        if not isinstance(entry, dict):
            raise WebShopDataError(f"{path} ({asin}): expected an object")
        if "attributes" in entry and not isinstance(entry["attributes"], list):
            raise WebShopDataError(f"{path} ({asin}): 'attributes' must be a list")
        if entry.get("instruction") and not entry.get("instruction_attributes"):
            raise WebShopDataError(
                f"{path} ({asin}): an instruction without 'instruction_attributes'"
            )
    return content


def _read_human_instructions(path: Path) -> dict[str, tuple[HumanInstruction, ...]]:
    content = _read_json(path, dict)
    return {
        str(asin): _parse_human_records(records, where=f"{path} ({asin})")
        for asin, records in content.items()
    }


def _parse_human_records(records: Iterable[Any], *, where: str) -> tuple[HumanInstruction, ...]:
    parsed = []
    for i, record in enumerate(records):
        if not isinstance(record, Mapping) or "instruction" not in record:
            raise WebShopDataError(f"{where} instruction {i}: expected {{'instruction', ...}}")
        parsed.append(
            HumanInstruction(
                text=str(record["instruction"]),
                attributes=tuple(str(a) for a in record.get("instruction_attributes") or ()),
                options=tuple(str(o) for o in record.get("instruction_options") or ()),
            )
        )
    return tuple(parsed)


def _read_reviews(path: Path) -> dict[str, tuple[tuple[Review, ...], str]]:
    content = _read_json(path, list)
    reviews = {}
    for i, entry in enumerate(content):
        if not isinstance(entry, Mapping) or "asin" not in entry:
            raise WebShopDataError(f"{path} record {i}: expected {{'asin', 'reviews', ...}}")
        where = f"{path} ({entry['asin']})"
        rating = entry.get("average_rating")
        reviews[str(entry["asin"])] = (
            _parse_reviews(entry.get("reviews") or [], where=where),
            "N.A." if rating in (None, "") else str(rating),
        )
    return reviews


def _parse_reviews(records: Iterable[Any], *, where: str) -> tuple[Review, ...]:
    parsed = []
    for record in records:
        if not isinstance(record, Mapping):
            raise WebShopDataError(f"{where}: a review must be an object")
        score = record.get("score", record.get("stars", 0))
        try:
            score = float(score)
        except (TypeError, ValueError) as error:
            raise WebShopDataError(f"{where}: review score {score!r} is not a number") from error
        body = record.get("body", record.get("review", ""))
        parsed.append(Review(title=str(record.get("title", "")), score=score, body=str(body)))
    return tuple(parsed)
