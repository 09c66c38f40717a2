"""Array versions of the statistics (numpy; no Django). ``benchlib.stats`` stays
standard-library only and keeps the reference loops; these give the same figures faster."""
