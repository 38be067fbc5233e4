"""Moving through WebShop's pages in one episode: what is on screen, and how a search or
a click changes it. No goal and no reward: :class:`~agentgym.webshop.env.WebShopEnv`
reads the instruction into the pages, checks the actions and scores the purchase."""

from __future__ import annotations

from collections.abc import Hashable

from agentgym.webshop import pages
from agentgym.webshop.shop import Shop


class Browser:
    """The pages of one episode over ``shop``'s catalog and search.

    Args:
        shop: the catalog, prices and search index.
        style: the pages' quirks (:class:`~agentgym.webshop.pages.PageStyle`).
        show_attributes: the item page offers the "Attributes" sub-page.

    Attributes:
        page: the page on screen.
        query: the last search's keywords, ``None`` on the search page.
        results: the last search's product ids (at most ``pages.MAX_RESULTS``).
        page_number: the results page shown (or left for a product), 1-based; 0 before a
            search.
        asin: the product whose page (or sub-page) is open, else ``None``.
        options: option name -> value chosen on the open product.
        sub_page: the open sub-page's name, else ``None``.
    """

    def __init__(self, shop: Shop, style: pages.PageStyle, show_attributes: bool):
        self.shop = shop
        self.style = style
        self.show_attributes = show_attributes
        self.instruction = ""
        self.page = pages.search_page("", style)
        self.query: str | None = None
        self.results: tuple[str, ...] = ()
        self.page_number = 0
        self.asin: str | None = None
        self.options: dict[str, str] = {}
        self.sub_page: str | None = None

    def state_key(self) -> Hashable:
        """``(page kind, query, results page, product, selected options, sub-page)``."""
        return (
            self.page.kind,
            self.query,
            self.page_number,
            self.asin,
            tuple(sorted(self.options.items())),
            self.sub_page,
        )

    def start(self, instruction: str) -> None:
        """A new episode for ``instruction``: its search page."""
        self.instruction = instruction
        self.to_search_page()

    def to_search_page(self) -> None:
        self.page = pages.search_page(self.instruction, self.style)
        self.query = None
        self.results = ()
        self.page_number = 0
        self.asin = None
        self.options = {}
        self.sub_page = None

    def search(self, query: str) -> None:
        """Search ``query`` and show the first results page."""
        self.query = query
        self.results = self.shop.search(query, pages.MAX_RESULTS)
        self.show_page(1)

    def click(self, label: str) -> None:
        """Follow the clickable ``label`` of the page (any but "Buy Now" and "search")."""
        kind = self.page.kind
        if label == pages.BACK_TO_SEARCH.lower():
            self.to_search_page()
        elif label == pages.NEXT_PAGE.lower():
            self.show_page(self.page_number + 1)
        elif label == pages.PREV_PAGE.lower() and kind == "results":
            self.show_page(self.page_number - 1)
        elif label == pages.PREV_PAGE.lower() and kind == "sub_page":
            self.show_item()
        elif label == pages.PREV_PAGE.lower():  # item page -> its results page
            self.show_page(self.page_number)
        elif kind == "item" and label in (s.lower() for s in self.sub_page_names()):
            self.sub_page = next(s for s in self.sub_page_names() if s.lower() == label)
            product = self.shop.product(self.asin)  # type: ignore[arg-type]
            self.page = pages.sub_page(self.instruction, product, self.sub_page, self.style)
        elif kind == "results":
            self.asin = next(a for a in self.visible_asins() if a.lower() == label)
            self.options = {}
            self.show_item()
        else:  # an option value on the item page; a later group wins, as in WebShop
            product = self.shop.product(self.asin)  # type: ignore[arg-type]
            name = [n for n, values in product.options.items() if label in values][-1]
            self.options[name] = label
            self.show_item()

    def show_page(self, page_number: int) -> None:
        self.page_number = max(1, page_number)
        self.asin = None
        self.options = {}
        self.sub_page = None
        products = [self.shop.product(a) for a in self.visible_asins()]
        self.page = pages.results_page(
            self.instruction, products, page=self.page_number, total=len(self.results),
            style=self.style,
        )

    def visible_asins(self) -> tuple[str, ...]:
        start = (self.page_number - 1) * pages.RESULTS_PER_PAGE
        return self.results[start : start + pages.RESULTS_PER_PAGE]

    def show_item(self) -> None:
        self.sub_page = None
        product = self.shop.product(self.asin)  # type: ignore[arg-type]
        self.page = pages.item_page(
            self.instruction, product, show_attributes=self.show_attributes, style=self.style
        )

    def show_done(self, score: float) -> None:
        """The page after the purchase, showing its ``score``."""
        self.page = pages.done_page(score)
        self.sub_page = None

    def sub_page_names(self) -> tuple[str, ...]:
        return pages.sub_page_names(self.show_attributes)
