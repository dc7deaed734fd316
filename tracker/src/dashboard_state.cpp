// (seam) The tracker's state as the dashboard's documents: filled in by issue 16's tracker work.
