"""WebShop's files: normalization of raw records, the processed form, clear errors."""

from __future__ import annotations

import json

import pytest

from agentgym.webshop.data import (
    DUMMY_ATTRIBUTE,
    WebShopDataError,
    WebShopFiles,
    load_catalog,
    normalize_option_value,
    normalize_raw_product,
    parse_raw_pricing,
)
from tests.conftest import shared_data_path

RAW = {
    "asin": "B0TEST0001",
    "name": "Acme Wool Socks",
    "full_description": "Warm socks.",
    "small_description": ["Merino wool", "Machine wash"],
    "pricing": "$12.99 - $15.49",
    "images": ["https://img/1.jpg"],
    "product_category": "Clothing › Socks",
    "category": "fashion",
    "query": "  Wool Socks ",
    "customization_options": {
        "Color": [{"value": "Black/Grey"}, {"value": " Navy "}],
        "Size": None,
    },
}


def test_raw_record_is_normalized_like_webshop():
    product = normalize_raw_product(RAW, {"B0TEST0001": {"attributes": ["merino wool"]}})
    assert product.title == "Acme Wool Socks"
    assert product.description == "Warm socks."
    assert product.bullet_points == ("Merino wool", "Machine wash")
    assert product.pricing == (12.99, 15.49)
    assert product.price_tag == "$12.99 to $15.49"
    assert dict(product.options) == {"color": ("black | grey", "navy")}  # None group skipped
    assert product.attributes == ("merino wool",)
    assert product.query == "wool socks"
    assert product.rating == "N.A." and product.reviews == ()
    assert product.main_image == "https://img/1.jpg"


def test_raw_record_defaults_and_skips():
    bare = {**RAW, "pricing": "", "small_description": "One bullet", "customization_options": ""}
    product = normalize_raw_product(bare, {})
    assert product.pricing == (100.0,) and product.price_tag == "$100.0"
    assert product.bullet_points == ("One bullet",)
    assert product.attributes == (DUMMY_ATTRIBUTE,)
    assert normalize_raw_product({**RAW, "asin": "nan"}) is None
    assert normalize_raw_product({**RAW, "asin": "B0TOOLONG000"}) is None


def test_price_parsing():
    assert parse_raw_pricing("$1,299.00") == ((1299.0,), "$1299.0")
    assert parse_raw_pricing("$5 - $7 - $9") == ((5.0, 7.0), "$5.0 to $7.0")
    with pytest.raises(WebShopDataError, match="no dollar amount"):
        parse_raw_pricing("free")


def test_option_value_normalization():
    assert normalize_option_value(" Black/White ") == "black | white"


def test_search_text_is_title_description_first_bullet_options():
    product = normalize_raw_product(RAW, {})
    assert product.search_text() == (
        "acme wool socks warm socks. merino wool color: black | grey, navy"
    )


def test_raw_file_with_attributes_and_human_instructions(tmp_path):
    second = {**RAW, "asin": "B0TEST0002", "name": "Second"}
    (tmp_path / "items_shuffle_2.json").write_text(json.dumps([RAW, second, RAW]))
    (tmp_path / "items_ins_v2_2.json").write_text(
        json.dumps(
            {
                "B0TEST0001": {
                    "attributes": ["merino wool"],
                    "instruction": "Find me merino wool socks",
                    "instruction_attributes": ["merino wool"],
                },
                "B0TEST0002": {"attributes": []},
            }
        )
    )
    (tmp_path / "items_human_ins.json").write_text(
        json.dumps(
            {
                "B0TEST0002": [
                    {
                        "asin": "B0TEST0002",
                        "instruction": "i want warm socks.",
                        "instruction_attributes": ["warm"],
                        "instruction_options": ["navy"],
                    }
                ]
            }
        )
    )
    catalog = load_catalog(tmp_path)
    assert [p.asin for p in catalog.products] == ["B0TEST0001", "B0TEST0002"]  # dedup
    assert catalog.synthetic_instructions["B0TEST0001"].text == "Find me merino wool socks"
    assert catalog.human_instructions["B0TEST0002"][0].options == ("navy",)
    assert catalog.by_asin["B0TEST0002"].attributes == ()
    assert len(load_catalog(tmp_path, num_products=1)) == 1


def test_errors_name_the_file_and_record(tmp_path):
    with pytest.raises(WebShopDataError, match="not found"):
        load_catalog(tmp_path / "missing.jsonl")
    with pytest.raises(WebShopDataError, match="no WebShop product file"):
        load_catalog(tmp_path)
    bad = tmp_path / "items_shuffle.json"
    bad.write_text("[{")
    with pytest.raises(WebShopDataError, match="not valid JSON"):
        load_catalog(bad)
    bad.write_text(json.dumps([{**RAW, "name": None}]))
    with pytest.raises(WebShopDataError, match=r"record 0 \(B0TEST0001\): missing field 'name'"):
        load_catalog(bad)
    lines = tmp_path / "documents.jsonl"
    lines.write_text('{"id": "x", "contents": "", "product": {"asin": "B1"}}\n')
    with pytest.raises(WebShopDataError, match="pricing"):
        load_catalog(lines)


def test_several_candidates_are_refused(tmp_path):
    (tmp_path / "items_shuffle_1.json").write_text("[]")
    (tmp_path / "items_shuffle_2.json").write_text("[]")
    with pytest.raises(WebShopDataError, match="several raw products files"):
        WebShopFiles.find(tmp_path)


@pytest.mark.data
def test_shared_processed_data_loads():
    catalog = load_catalog(shared_data_path("webshop"))
    assert len(catalog) == 1000
    assert len(catalog.synthetic_instructions) == 415
    assert len(catalog.human_instructions) == 13
    first = catalog.products[0]
    assert first.asin == "B06Y3VLDFB" and first.price_tag == "$877.8"
    assert first.attributes == ("console table", "solid wood")
    assert sorted({p.category for p in catalog.products}) == [
        "beauty", "electronics", "fashion", "garden", "grocery",
    ]  # fmt: skip
    # the stored "contents" field is exactly our search text
    with open(shared_data_path("webshop", "webshop_minimal_documents_1k.jsonl")) as f:
        for line, product in zip(f, catalog.products, strict=True):
            assert json.loads(line)["contents"] == product.search_text()
