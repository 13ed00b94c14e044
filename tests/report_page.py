"""Reads a rendered report page as the tests need it: the article tables' cells (strategy, variant, metric,
the exact value and the shown text), the figures, and the boxes the page's script records on load."""

from __future__ import annotations

from html.parser import HTMLParser


class ReportPage(HTMLParser):
    """The article tables' cells, the figures and the boxes the page's script recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.table: str | None = None
        self.row: tuple[str, str] | None = None
        self.cell: dict | None = None
        self.cells: list[dict] = []
        self.boxes: dict[str, list[tuple[int, int, int, int]]] = {"table": [], "img": []}
        self.body: dict[str, str] = {}
        self.images: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = {k: v or "" for k, v in a.items()}
        if tag in self.boxes and a.get("data-box"):
            self.boxes[tag].append(tuple(int(v) for v in a["data-box"].split(",")))
        if tag == "table":
            self.table = a.get("id")
        elif tag == "tr":
            self.row = (a.get("data-strategy"), a.get("data-variant"))
        elif tag == "td" and "data-value" in a:
            self.cell = {"table": self.table, "row": self.row, "metric": a["data-metric"], "value": a["data-value"],
                         "text": ""}
        elif tag == "img":
            self.images.append(a.get("src", ""))

    def handle_data(self, data):
        if self.cell is not None:
            self.cell["text"] += data

    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.cells.append(self.cell)
            self.cell = None


def parse_report(page: str) -> ReportPage:
    parser = ReportPage()
    parser.feed(page)
    return parser
