"""A Sphinx extension that numbers exercises (and figures, tables, code blocks) chapter by chapter.

The book's table of contents is not numbered (each chapter's title carries its own number, "# 11.
RoBERTa"), and Sphinx then counts every numbered item through the whole book: chapter 11's
exercises were Exercises 37 to 39. Here, after Sphinx has assigned its numbers, the items of
`chapters/NN_slug` are renumbered NN.1, NN.2, ... in the order Sphinx found them, so the page
says "Exercise 11.2" and every reference to the label says the same.
"""
import re

CHAPTER = re.compile(r"^chapters/(\d+)_")


def chapter_number(docname: str) -> int | None:
    """11 for "chapters/11_roberta"; None for a page that is not a chapter."""
    found = CHAPTER.match(docname)
    return int(found.group(1)) if found else None


def renumber(fignumbers: dict, chapter: int) -> dict:
    """{figtype: {id: (chapter, k)}}: each type's items numbered 1, 2, ... in their old order."""
    return {figtype: {node_id: (chapter, k) for k, (node_id, _) in
                      enumerate(sorted(numbers.items(), key=lambda item: item[1]), 1)}
            for figtype, numbers in fignumbers.items()}


def _number_by_chapter(app, env):
    for docname, fignumbers in env.toc_fignumbers.items():
        chapter = chapter_number(docname)
        if chapter is not None:
            env.toc_fignumbers[docname] = renumber(fignumbers, chapter)
    return []


def setup(app):
    # After Sphinx's own TocTreeCollector (priority 500) has assigned the book-wide numbers.
    app.connect("env-get-updated", _number_by_chapter, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
