"""Where a study's files live and how they are written and read: storage, tables, metadata files,
whole-file writes."""
