package org.plateau.spark;

import java.io.Serializable;

/** One readable manifest row: what executors need to read and check a segment file. */
record Segment(
    long id,
    int partition,
    long startOffset,
    long endOffset,
    long recordCount,
    long timeMin,
    long timeMax,
    long sizeBytes,
    String path,
    String checksums)
    implements Serializable {}
