"""Reports: tables, output folders and plots made from result DataFrames (never from text)."""
