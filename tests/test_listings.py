"""make listings: stored package listings rendered again from the package."""

import inspect

from annotated_transformer.blocks import attention as attention_module
from annotated_transformer.book.listings import refresh_output


def listing(heading: str, code: str) -> dict:
    markdown = f"{heading}\n\n```python\n{code}\n```"
    return {"data": {"text/markdown": markdown, "text/plain": code}}


def test_a_stale_listing_is_rendered_again_from_the_package():
    output = listing(
        "`attention` in `annotated_transformer/blocks/attention.py`", "old code"
    )
    assert refresh_output(output)
    source = inspect.getsource(attention_module.attention).rstrip()
    assert output["data"]["text/plain"] == source
    assert not refresh_output(output)  # now current: nothing to do


def test_a_listing_of_code_that_moved_module_is_found_by_its_name():
    # Before the layout by layers, attention lived in the package's top folder.
    output = listing("`attention` in `annotated_transformer/attention.py`", "old")
    assert refresh_output(output)
    markdown = output["data"]["text/markdown"]
    assert markdown.startswith(
        "`attention` in `annotated_transformer/blocks/attention.py`"
    )


def test_outputs_that_are_not_listings_are_left_alone():
    output = {"data": {"text/plain": "tensor([1., 2.])"}}
    assert not refresh_output(output)
    assert output == {"data": {"text/plain": "tensor([1., 2.])"}}


def test_a_name_two_modules_define_is_found_where_its_file_name_still_is():
    # multi30k and imdb both define tokenize: the old path's file name decides.
    output = listing("`tokenize` in `annotated_transformer/multi30k.py`", "old")
    assert refresh_output(output)
    markdown = output["data"]["text/markdown"]
    assert markdown.startswith(
        "`tokenize` in `annotated_transformer/data/multi30k.py`"
    )
