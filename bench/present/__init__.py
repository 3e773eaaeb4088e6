"""Views: number formatting, document blocks, tables, plots, report sections and the terminal
summaries."""
