"""Documents: what kind a file is, and the readers of DOCX, PDF, XLSX and PPTX.

A leaf package: it knows bytes and file names, nothing of repositories.
:mod:`strata.documents.kinds` says what a file is (its type from the name,
checked against the content, its text encoding); :mod:`strata.documents.readers`
turns a document's bytes into text a model or an index can read.
"""
