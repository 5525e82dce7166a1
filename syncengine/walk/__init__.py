"""Walking the live trees: the scan dispatcher, the listing and table walks, missing
paths, and the forked workers that split a walk across cores."""
