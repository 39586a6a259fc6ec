"""A Sphinx extension that writes each <script> of a page once.

Sphinx 7.4 (the newest jupyter-book 1.x allows) records an inline script that an extension adds
after the builder has started twice: once with the file name None and once with ''. Both copies
are written, and sphinx-thebe's copy declares a `const`, so every page threw
"Identifier 'THEBE_JS_URL' has already been declared" in a real browser (tests/test_rendering.py
loads every page in headless Chromium and fails on any JavaScript error).
"""


def _script_key(script) -> tuple:
    return (script.filename or "", tuple(sorted(script.attributes.items())))


def _write_each_script_once(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    # After the other extensions have added their scripts to the page context.
    app.connect("html-page-context", _write_each_script_once, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
