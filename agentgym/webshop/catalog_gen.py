"""A generated WebShop catalog in WebShop's schema: the default when no data is given.

Five top categories (``beauty``, ``fashion``, ``grocery``, ``electronics``, ``home``),
each with product types that fix a scrape query, an Amazon-style category path, title
nouns, an attribute vocabulary, option groups (color, size, flavor, scent, count) and a
price range. A product draws a brand, 3-6 attributes of its type, up to two option
groups with 2-5 values each, a price (a fifth of them a price range), a rating and 0-2
reviews; its title, description and bullet points are written from those draws, so
every attribute appears in its text as in WebShop's scraped data. About 70% of products
get a synthetic instruction in WebShop's style (``"Find me sulfate free, tea tree
shampoo"``) naming 1-3 of their attributes; goals then follow WebShop's rule (one per
option combination), which gives about 4-5 goals per product.

Generation is deterministic for a ``(num_products, seed)`` pair: one
``np.random.Generator`` seeded once draws a row of uniforms per product (in blocks, in
product order) and the product is written from its row in plain Python, so 1,000
products take a fraction of a second and 100,000 about ten seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from agentgym.webshop.data import Catalog, Product, Review, SyntheticInstruction

DEFAULT_NUM_PRODUCTS = 1000
DEFAULT_CATALOG_SEED = 0
INSTRUCTION_SHARE = 0.7
PRICE_RANGE_SHARE = 0.2

OPTION_GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    # key: (option name shown on the item page, value vocabulary)
    "color": (
        "color",
        (
            "black", "white", "navy blue", "grey", "red", "pink", "beige", "olive green",
            "light blue", "burgundy", "ivory", "teal", "khaki", "purple", "brown",
        ),
    ),
    "apparel size": ("size", ("x-small", "small", "medium", "large", "x-large", "xx-large")),
    "shoe size": ("size", ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "11", "12")),
    "bed size": ("size", ("twin", "full", "queen", "king", "california king")),
    "volume": ("size", ("1 fl oz", "1.7 fl oz", "3.4 fl oz", "8 fl oz", "16 fl oz")),
    "weight": ("size", ("8 ounce", "12 ounce", "1 pound", "2 pound", "5 pound")),
    "length": ("size", ("3 ft", "6 ft", "10 ft", "15 ft")),
    "flavor": (
        "flavor name",
        (
            "vanilla", "chocolate", "strawberry", "salted caramel", "peanut butter",
            "original", "cinnamon", "mint", "lemon", "honey",
        ),
    ),
    "scent": (
        "scent",
        ("lavender", "unscented", "coconut", "eucalyptus", "rose", "citrus", "sandalwood"),
    ),
    "count": ("count", ("1 count", "2 count", "pack of 3", "pack of 6", "12 count", "24 count")),
}
"""Option groups: the value lists are disjoint within any product's groups."""


@dataclass(frozen=True)
class ProductType:
    """One kind of product: what its scraped records have in common."""

    query: str
    nouns: tuple[str, ...]
    path: str
    attributes: tuple[str, ...]
    option_groups: tuple[str, ...]
    price: tuple[float, float]
    adjectives: tuple[str, ...] = ()


def _t(query, nouns, path, attributes, options, price, adjectives=()) -> ProductType:
    return ProductType(
        query, tuple(nouns), path, tuple(attributes), tuple(options), price, tuple(adjectives)
    )


PRODUCT_TYPES: dict[str, tuple[ProductType, ...]] = {
    "beauty": (
        _t("face moisturizer", ["face moisturizer", "moisturizing cream"],
           "Beauty & Personal Care › Skin Care › Face › Creams & Moisturizers",
           ["hyaluronic acid", "sensitive skin", "fragrance free", "paraben free", "dry skin",
            "fine lines", "natural ingredients", "vitamin c", "cruelty free"],
           ["volume", "scent"], (8.0, 60.0), ["hydrating", "daily", "lightweight"]),
        _t("shampoo", ["shampoo", "hair shampoo"],
           "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
           ["sulfate free", "tea tree", "dry hair", "hair growth", "damaged hair",
            "natural ingredients", "paraben free", "color treated"],
           ["volume", "scent"], (6.0, 35.0), ["nourishing", "volumizing", "clarifying"]),
        _t("lipstick", ["lipstick", "matte lipstick"],
           "Beauty & Personal Care › Makeup › Lips › Lipstick",
           ["long lasting", "cruelty free", "highly pigmented", "easy apply", "vitamin e",
            "waterproof formula", "travel size"],
           ["color", "count"], (5.0, 28.0), ["velvet", "creamy", "satin"]),
        _t("nail polish", ["nail polish", "gel nail polish"],
           "Beauty & Personal Care › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish",
           ["quick drying", "long lasting", "non toxic", "high gloss", "chip resistant",
            "easy apply"],
           ["color", "count"], (4.0, 22.0), ["glossy", "salon"]),
        _t("body wash", ["body wash", "shower gel"],
           "Beauty & Personal Care › Skin Care › Body › Body Washes",
           ["dry skin", "sensitive skin", "natural ingredients", "shea butter", "tea tree",
            "essential oils", "paraben free"],
           ["scent", "volume"], (5.0, 25.0), ["moisturizing", "refreshing"]),
        _t("hair dryer", ["hair dryer", "blow dryer"],
           "Beauty & Personal Care › Hair Care › Styling Tools › Hair Dryers",
           ["fast drying", "ionic technology", "low noise", "travel size", "heat settings",
            "damaged hair", "easy carry"],
           ["color"], (19.0, 120.0), ["professional", "compact"]),
        _t("sunscreen", ["sunscreen", "sunscreen lotion"],
           "Beauty & Personal Care › Skin Care › Sunscreens & Tanning Products › Sunscreens",
           ["broad spectrum", "water resistant", "sensitive skin", "reef safe", "oil free",
            "fragrance free", "travel size"],
           ["volume", "count"], (6.0, 30.0), ["mineral", "sheer"]),
        _t("makeup brush set", ["makeup brush set", "makeup brushes"],
           "Beauty & Personal Care › Tools & Accessories › Makeup Brushes & Tools › Brush Sets",
           ["synthetic hair", "easy clean", "cruelty free", "travel size", "soft bristles",
            "carrying case"],
           ["color", "count"], (7.0, 45.0), ["premium", "complete"]),
    ),
    "fashion": (
        _t("men's running shoes", ["running shoes", "sneakers"],
           "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
           ["rubber sole", "lace up", "non slip", "breathable mesh", "arch support",
            "lightweight design", "memory foam"],
           ["shoe size", "color"], (29.0, 130.0), ["athletic", "cushioned"]),
        _t("women's t-shirt", ["t-shirt", "tee shirt"],
           "Clothing, Shoes & Jewelry › Women › Clothing › Tops, Tees & Blouses › T-Shirts",
           ["short sleeve", "machine wash", "relaxed fit", "soft material", "cotton spandex",
            "crew neck", "daily wear"],
           ["apparel size", "color"], (9.0, 35.0), ["casual", "basic"]),
        _t("men's jeans", ["jeans", "denim jeans"],
           "Clothing, Shoes & Jewelry › Men › Clothing › Jeans",
           ["slim fit", "straight leg", "machine wash", "button closure", "stretch fabric",
            "relaxed fit", "classic fit"],
           ["apparel size", "color"], (19.0, 70.0), ["stretch", "everyday"]),
        _t("women's hoodie", ["hoodie", "hooded sweatshirt"],
           "Clothing, Shoes & Jewelry › Women › Clothing › Active › Active Hoodies",
           ["long sleeve", "drawstring closure", "fleece lined", "machine wash",
            "relaxed fit", "daily wear", "kangaroo pocket"],
           ["apparel size", "color"], (18.0, 60.0), ["cozy", "oversized"]),
        _t("athletic socks", ["socks", "athletic socks"],
           "Clothing, Shoes & Jewelry › Men › Clothing › Socks › Athletic Socks",
           ["moisture wicking", "cushioned sole", "arch support", "machine wash",
            "breathable cotton", "non slip"],
           ["count", "color"], (8.0, 28.0), ["performance", "ankle"]),
        _t("women's leggings", ["leggings", "yoga leggings"],
           "Clothing, Shoes & Jewelry › Women › Clothing › Active › Active Leggings",
           ["high waist", "tummy control", "moisture wicking", "squat proof",
            "polyester spandex", "quick drying"],
           ["apparel size", "color"], (12.0, 45.0), ["seamless", "workout"]),
        _t("baseball cap", ["baseball cap", "dad hat"],
           "Clothing, Shoes & Jewelry › Men › Accessories › Hats & Caps › Baseball Caps",
           ["adjustable strap", "cotton twill", "sun protection", "hand wash", "unisex adult",
            "breathable fabric"],
           ["color"], (8.0, 30.0), ["classic", "vintage"]),
        _t("women's sandals", ["sandals", "flat sandals"],
           "Clothing, Shoes & Jewelry › Women › Shoes › Sandals › Flats",
           ["open toe", "rubber sole", "ankle strap", "arch support", "non slip",
            "faux leather"],
           ["shoe size", "color"], (15.0, 60.0), ["summer", "comfort"]),
    ),
    "grocery": (
        _t("coffee beans", ["coffee beans", "whole bean coffee"],
           "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Coffee › Whole Coffee Beans",
           ["medium roast", "dark roast", "usda organic", "fair trade", "single origin",
            "non gmo", "kosher certified"],
           ["weight", "flavor"], (9.0, 40.0), ["arabica", "small batch"]),
        _t("protein bars", ["protein bars", "protein snack bars"],
           "Grocery & Gourmet Food › Snacks & Sweets › Snack Bars › Protein Bars",
           ["high protein", "gluten free", "low sugar", "keto friendly", "non gmo",
            "individually wrapped", "plant based"],
           ["flavor", "count"], (12.0, 45.0), ["chewy", "crunchy"]),
        _t("green tea", ["green tea", "green tea bags"],
           "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Tea › Green",
           ["usda organic", "caffeine free", "non gmo", "natural flavors", "kosher certified",
            "individually wrapped"],
           ["flavor", "count"], (5.0, 25.0), ["japanese", "loose leaf"]),
        _t("mixed nuts", ["mixed nuts", "roasted nuts"],
           "Grocery & Gourmet Food › Snacks & Sweets › Snack Foods › Nuts & Seeds › Mixed Nuts",
           ["low sodium", "non gmo", "gluten free", "keto friendly", "resealable bag",
            "high protein", "kosher certified"],
           ["weight", "flavor"], (7.0, 35.0), ["roasted", "deluxe"]),
        _t("olive oil", ["olive oil", "extra virgin olive oil"],
           "Grocery & Gourmet Food › Pantry Staples › Cooking Oils › Olive Oils",
           ["cold pressed", "usda organic", "non gmo", "kosher certified", "single origin",
            "glass bottle"],
           ["volume", "count"], (9.0, 45.0), ["premium", "mediterranean"]),
        _t("gummy vitamins", ["gummy vitamins", "vitamin gummies"],
           "Grocery & Gourmet Food › Candy & Chocolate › Gummy Candies",
           ["sugar free", "gluten free", "natural flavors", "plant based", "dairy free",
            "non gmo", "vitamin c"],
           ["flavor", "count"], (8.0, 30.0), ["chewable", "daily"]),
        _t("pasta sauce", ["pasta sauce", "marinara sauce"],
           "Grocery & Gourmet Food › Pantry Staples › Sauces, Gravies & Marinades › Pasta Sauces",
           ["no sugar added", "gluten free", "non gmo", "low carb", "keto friendly",
            "ready eat"],
           ["weight", "count"], (4.0, 24.0), ["traditional", "homestyle"]),
        _t("hot cocoa mix", ["hot cocoa mix", "hot chocolate mix"],
           "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Cocoa › Hot Cocoa",
           ["gluten free", "kosher certified", "dairy free", "low sugar", "natural flavors",
            "individually wrapped"],
           ["flavor", "count"], (5.0, 22.0), ["rich", "creamy"]),
    ),
    "electronics": (
        _t("wireless earbuds", ["wireless earbuds", "bluetooth earbuds"],
           "Electronics › Headphones, Earbuds & Accessories › Earbuds",
           ["noise cancelling", "wireless bluetooth", "water resistant", "fast charging",
            "hands free", "charging case", "stereo sound"],
           ["color"], (19.0, 150.0), ["true wireless", "sport"]),
        _t("phone case", ["phone case", "protective case"],
           "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
           ["shock absorbing", "wireless charging", "slim fit", "heavy duty", "easy install",
            "scratch resistant", "raised edges"],
           ["color"], (7.0, 35.0), ["rugged", "clear"]),
        _t("usb c cable", ["usb c cable", "charging cable"],
           "Electronics › Computers & Accessories › Cables & Accessories › Cables › USB Cables",
           ["fast charging", "high speed", "nylon braided", "data transfer", "aluminum alloy",
            "tangle free"],
           ["length", "count"], (5.0, 25.0), ["durable", "braided"]),
        _t("bluetooth speaker", ["bluetooth speaker", "portable speaker"],
           "Electronics › Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
           ["wireless bluetooth", "water resistant", "stereo sound", "long battery life",
            "hands free", "easy carry", "deep bass"],
           ["color"], (19.0, 140.0), ["portable", "outdoor"]),
        _t("hdmi cable", ["hdmi cable", "high speed hdmi cable"],
           "Electronics › Television & Video › Accessories › Cables › HDMI Cables",
           ["high speed", "gold plated", "plug play", "high definition", "nylon braided",
            "ultra hd"],
           ["length", "count"], (6.0, 30.0), ["premium", "4k"]),
        _t("wireless mouse", ["wireless mouse", "computer mouse"],
           "Electronics › Computers & Accessories › Computer Accessories & Peripherals › Keyboards, Mice & Accessories › Mice",
           ["wireless bluetooth", "ergonomic design", "silent click", "usb receiver",
            "plug play", "long battery life"],
           ["color"], (9.0, 60.0), ["ergonomic", "slim"]),
        _t("power bank", ["power bank", "portable charger"],
           "Cell Phones & Accessories › Chargers & Power Adapters › Portable Power Banks",
           ["fast charging", "usb port", "high capacity", "easy carry", "led display",
            "slim design"],
           ["color"], (15.0, 70.0), ["compact", "dual port"]),
        _t("screen protector", ["screen protector", "tempered glass screen protector"],
           "Cell Phones & Accessories › Accessories › Screen Protectors",
           ["tempered glass", "easy install", "bubble free", "scratch resistant",
            "high definition", "case friendly"],
           ["count"], (5.0, 20.0), ["ultra clear", "full coverage"]),
    ),
    "home": (
        _t("bath towels", ["bath towels", "towel set"],
           "Home & Kitchen › Bath › Towels › Bath Towels",
           ["super soft", "highly absorbent", "machine washable", "quick drying",
            "100% cotton", "hotel quality"],
           ["color", "count"], (12.0, 60.0), ["plush", "luxury"]),
        _t("throw pillow covers", ["throw pillow covers", "pillow covers"],
           "Home & Kitchen › Bedding › Decorative Pillows, Inserts & Covers › Throw Pillow Covers",
           ["living room", "machine washable", "hidden zipper", "super soft", "double sided",
            "farmhouse decor"],
           ["color", "count"], (8.0, 35.0), ["decorative", "boho"]),
        _t("bed sheets", ["bed sheets", "sheet set"],
           "Home & Kitchen › Bedding › Sheets & Pillowcases › Sheet & Pillowcase Sets",
           ["deep pocket", "wrinkle free", "machine washable", "breathable cooling",
            "super soft", "fade resistant"],
           ["bed size", "color"], (19.0, 90.0), ["microfiber", "hotel"]),
        _t("led desk lamp", ["led desk lamp", "table lamp"],
           "Tools & Home Improvement › Lighting & Ceiling Fans › Lamps & Shades › Desk Lamps",
           ["eye caring", "energy efficient", "usb port", "touch control", "dimmable light",
            "living room", "space saving"],
           ["color"], (15.0, 70.0), ["modern", "adjustable"]),
        _t("storage bins", ["storage bins", "storage baskets"],
           "Home & Kitchen › Storage & Organization › Baskets, Bins & Containers › Storage Bins",
           ["space saving", "foldable design", "easy assemble", "storage space",
            "dust proof", "living room"],
           ["color", "count"], (12.0, 50.0), ["fabric", "stackable"]),
        _t("kitchen knife set", ["knife set", "kitchen knives"],
           "Home & Kitchen › Kitchen & Dining › Cutlery & Knife Accessories › Knife Block Sets",
           ["stainless steel", "dishwasher safe", "ergonomic handle", "easy clean",
            "high carbon", "wooden block"],
           ["count", "color"], (20.0, 150.0), ["professional", "german"]),
        _t("shower curtain", ["shower curtain", "bathroom curtain"],
           "Home & Kitchen › Bath › Bathroom Accessories › Shower Curtains, Hooks & Liners › Shower Curtains",
           ["machine washable", "water repellent", "mildew resistant", "easy install",
            "heavy duty", "rust proof hooks"],
           ["color"], (10.0, 40.0), ["waterproof", "fabric"]),
        _t("scented candle", ["scented candle", "soy candle"],
           "Home & Kitchen › Home Décor › Candles & Holders › Candles › Jar Candles",
           ["soy wax", "long lasting", "natural ingredients", "gift set", "lead free",
            "essential oils"],
           ["scent", "count"], (8.0, 40.0), ["aromatherapy", "large"]),
    ),
}
"""The product types of each top category."""

CATEGORIES: tuple[str, ...] = tuple(PRODUCT_TYPES)

_BRAND_HEADS = (
    "vel", "lum", "nor", "aur", "ked", "sol", "mar", "zen", "bri", "cal", "dor", "fen",
    "gal", "hal", "ist", "jor", "kal", "lir", "mon", "ner", "oro", "pel", "qui", "ros",
)
_BRAND_TAILS = ("ora", "ix", "ano", "ella", "ton", "ium", "ova", "ent", "ara", "eco", "ly", "io")

_DESCRIPTION_TEMPLATES = (
    "{brand} {noun} made for everyday use. It is {a1} and {a2}, so you can count on it.",
    "Meet the {noun} from {brand}: {a1}, {a2} and built to last.",
    "Our {noun} combines {a1} with {a2} for a better experience every day.",
    "{brand} designed this {noun} to be {a1}. {A2} makes it a favorite.",
)
_BULLET_TEMPLATES = (
    "{A}: carefully tested to give you the quality you expect.",
    "{A} - a thoughtful detail of this {noun}.",
    "{A}: loved by customers who want a reliable {noun}.",
    "{A} for worry-free use at home or on the go.",
)
_INSTRUCTION_TEMPLATES = (
    "Find me {attrs} {query}",
    "Find me {query} with {attrs}",
    "Find me {first} {query} with {rest}",
)
_REVIEW_TITLES = ("Great value", "Works as described", "Not bad", "Love it", "Could be better")
_REVIEW_BODIES = (
    "Exactly what I was looking for. Would buy again.",
    "Good quality for the price, shipping was quick.",
    "Does the job, though the packaging could be better.",
    "My family uses it every day and we are happy with it.",
)


def generate_catalog(
    num_products: int = DEFAULT_NUM_PRODUCTS, seed: int = DEFAULT_CATALOG_SEED
) -> Catalog:
    """Generate ``num_products`` products with synthetic instructions.

    Args:
        num_products: how many products (>= 1); ASINs are ``"G"`` plus 9 digits (unique).
        seed: seed of the one ``np.random.Generator`` behind every draw.

    Returns:
        A :class:`~agentgym.webshop.data.Catalog` in WebShop's schema whose
        ``source`` is ``"generated(num_products=..., seed=...)"``.
    """
    if num_products < 1:
        raise ValueError(f"num_products must be >= 1, got {num_products}")
    rng = np.random.default_rng(seed)
    brands = _brands(rng)
    types = [(category, t) for category in CATEGORIES for t in PRODUCT_TYPES[category]]
    asin_numbers = rng.choice(10**9, size=num_products, replace=False).tolist()
    products: list[Product] = []
    instructions: dict[str, SyntheticInstruction] = {}
    for start in range(0, num_products, _CHUNK):
        rows = rng.random((min(_CHUNK, num_products - start), _DRAWS_PER_PRODUCT)).tolist()
        for offset, row in enumerate(rows):
            draws = _Draws(row)
            category, kind = types[draws.integer(len(types))]
            asin = f"G{int(asin_numbers[start + offset]):09d}"
            product, instruction = _product(draws, asin, category, kind, brands)
            products.append(product)
            if instruction is not None:
                instructions[asin] = instruction
    return Catalog(
        products=tuple(products),
        synthetic_instructions=MappingProxyType(instructions),
        human_instructions=MappingProxyType({}),
        source=f"generated(num_products={num_products}, seed={seed})",
    )


_CHUNK = 4096
_DRAWS_PER_PRODUCT = 160
"""Uniform draws reserved per product (a product uses at most about 100)."""


class _Draws:
    """A product's row of uniform draws, consumed in order (fast pure-Python sampling)."""

    def __init__(self, row: list[float]):
        self._row = row
        self._next = 0

    def uniform(self, low: float = 0.0, high: float = 1.0) -> float:
        value = self._row[self._next]
        self._next += 1
        return low + (high - low) * value

    def integer(self, high: int, low: int = 0) -> int:
        """An integer in ``[low, high)``."""
        return low + min(int(self.uniform() * (high - low)), high - low - 1)

    def item(self, items: Sequence[str]) -> str:
        return items[self.integer(len(items))]

    def subset(self, items: Sequence[str], k: int) -> list[str]:
        """``k`` distinct items in their original order (random-key sampling)."""
        keys = [self.uniform() for _ in items]
        chosen = sorted(sorted(range(len(items)), key=keys.__getitem__)[:k])
        return [items[i] for i in chosen]

    def shuffled(self, items: Sequence[str]) -> list[str]:
        keys = [self.uniform() for _ in items]
        return [items[i] for i in sorted(range(len(items)), key=keys.__getitem__)]


def _brands(rng: np.random.Generator) -> tuple[str, ...]:
    ordered = sorted({h + t for h in _BRAND_HEADS for t in _BRAND_TAILS})
    picks = rng.choice(len(ordered), size=min(120, len(ordered)), replace=False)
    return tuple(ordered[int(i)].capitalize() for i in picks)


def _product(
    draws: _Draws,
    asin: str,
    category: str,
    kind: ProductType,
    brands: Sequence[str],
) -> tuple[Product, SyntheticInstruction | None]:
    brand = draws.item(brands)
    noun = draws.item(kind.nouns)
    attributes = draws.subset(kind.attributes, draws.integer(7, 3))
    order = draws.shuffled(attributes)

    group_draw = draws.uniform()
    num_groups = 0 if group_draw < 0.2 else 1 if group_draw < 0.65 else 2
    options: dict[str, tuple[str, ...]] = {}
    for key in kind.option_groups[:num_groups]:
        name, vocabulary = OPTION_GROUPS[key]
        options[name] = tuple(draws.subset(vocabulary, draws.integer(6, 2)))

    low, high = kind.price
    price = round(draws.uniform(low, high), 2)
    if draws.uniform() < PRICE_RANGE_SHARE:
        top = round(price * draws.uniform(1.1, 1.6), 2)
        pricing: tuple[float, ...] = (price, top)
        price_tag = f"${price} to ${top}"
    else:
        pricing = (price,)
        price_tag = f"${price}"

    adjective = ""
    if kind.adjectives and draws.uniform() < 0.6:
        adjective = draws.item(kind.adjectives)
    title = " ".join(w for w in (brand, adjective.title(), noun.title()) if w)
    title = f"{title}, {', '.join(a.title() for a in order[:2])}"
    if "size" not in options and "count" not in options and draws.uniform() < 0.5:
        title += f" - {draws.item(('2', '3', '4', '6'))} Pack"

    a1, a2 = order[0], order[1 % len(order)]
    description = ""
    if draws.uniform() < 0.85:
        description = draws.item(_DESCRIPTION_TEMPLATES).format(
            brand=brand, noun=noun, a1=a1, a2=a2, A2=a2.capitalize()
        )
    bullets = tuple(
        draws.item(_BULLET_TEMPLATES).format(A=attribute.capitalize(), noun=noun)
        for attribute in order
    )

    rating = "N.A." if draws.uniform() < 0.5 else f"{draws.uniform(3.0, 5.0):.1f}"
    reviews = tuple(
        Review(
            title=draws.item(_REVIEW_TITLES),
            score=float(draws.integer(6, 1)),
            body=draws.item(_REVIEW_BODIES),
        )
        for _ in range(draws.integer(3))
    )
    product = Product(
        asin=asin,
        title=title,
        description=description,
        bullet_points=bullets,
        pricing=pricing,
        price_tag=price_tag,
        options=MappingProxyType(options),
        attributes=tuple(attributes),
        category=category,
        query=kind.query,
        product_category=kind.path,
        rating=rating,
        reviews=reviews,
        main_image="",
    )

    instruction = None
    if draws.uniform() < INSTRUCTION_SHARE:
        wanted = draws.shuffled(draws.subset(attributes, draws.integer(4, 1)))
        template = draws.item(_INSTRUCTION_TEMPLATES)
        if "{first}" in template and len(wanted) < 2:
            template = _INSTRUCTION_TEMPLATES[1]
        text = template.format(
            attrs=", ".join(wanted),
            query=kind.query,
            first=wanted[0],
            rest=", ".join(wanted[1:]),
        )
        instruction = SyntheticInstruction(text=text, attributes=tuple(wanted))
    return product, instruction
