"""A Sphinx extension that gives the pages the book's repository address as substitutions.

The address is written once, in _config.yml (`repository: url`), which Jupyter Book hands to the
theme for its launch buttons (`html_theme_options["repository_url"]`). Here it becomes MyST
substitutions, so that a page never types it:

- `{{ repository_link }}`: a link to the repository;
- `{{ colab_badge }}`: the "Open in Colab" badge of chapter 1;
- `{{ colab_prefix }}`: the Colab address of the chapters folder (append `NAME.ipynb`).

The notebooks' Colab cells and the README cannot read the configuration (they run or are read
without the book), so tests/test_notebooks.py checks that they hold the same address.
"""

COLAB = "https://colab.research.google.com"
BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
FIRST_CHAPTER = "chapters/01_why_encoder_only.ipynb"


def substitutions(url: str, branch: str = "main") -> dict[str, str]:
    """The substitutions for the repository at `url` (https://github.com/OWNER/NAME)."""
    url = url.rstrip("/")
    owner_name = url.split("github.com/", 1)[1]
    chapters = f"{COLAB}/github/{owner_name}/blob/{branch}/chapters/"
    first = f"{COLAB}/github/{owner_name}/blob/{branch}/{FIRST_CHAPTER}"
    return {
        "repository_link": f"[{url.split('://', 1)[1]}]({url})",
        "colab_badge": f"[![Open chapter 1 in Colab]({BADGE})]({first})",
        "colab_prefix": f"`{chapters}`",
    }


def _add_substitutions(app, config):
    options = config.html_theme_options or {}
    url = options.get("repository_url")
    if not url:
        return
    config.myst_substitutions = {**(config.myst_substitutions or {}),
                                 **substitutions(url, options.get("repository_branch") or "main")}


def setup(app):
    app.connect("config-inited", _add_substitutions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
