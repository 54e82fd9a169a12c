/*
 * folded.h -- the text ingest formats of /ingest: folded (collapsed), lines,
 * trie and tree (docs/wire-formats.md §2).  Each parser adds values to ONE series of a batch
 * (the series is created by the caller from the /ingest name).
 *
 * Text decoding, shared by folded and lines: a UTF-8 BOM is skipped; a
 * UTF-16 LE or BE BOM makes the body UTF-16, which is transcoded to UTF-8
 * (unpaired surrogates become U+FFFD); lines end at \n, with a preceding
 * \r dropped; the last line needs no newline.
 *
 * folded:  "f1;f2;...;leaf <count>" (root first).  The count is the text
 *   after the LAST space; a line with no space, an empty line, and a line
 *   starting with '#' are skipped.  A count that strconv.Atoi rejects (an
 *   optional sign, then decimal digits, within int64) fails the whole
 *   request (SM_EMALFORMED, naming the line number), as Pyroscope does; a
 *   count <= 0 is dropped.  Frames are split at ';'; empty frames are
 *   kept as empty names (Pyroscope keeps them).  Repeated stacks are summed
 *   by the batch.
 * lines:   one stack per line ("f1;f2;leaf"), each line counts 1.
 * trie:    pre-order DFS of a byte-prefix trie over "a;b;c" keys; each node
 *   is uvarint nameLen, name bytes, uvarint value, uvarint nChildren; a
 *   node's key is the concatenation of the names on its path and value > 0
 *   emits it (then split at ';').  Depth of nesting and sizes are bounded
 *   by the input; truncated input is SM_EMALFORMED.
 * tree:    og Pyroscope's dictionary-free tree (binary/octet-stream+tree):
 *   the same node encoding as trie, but a node's name is one path
 *   component: a node's key is the names below the root joined with
 *   ';' (the root's own name is not a frame), and its value > 0 emits
 *   it.  The body is the root's subtree; bytes after it are ignored
 *   and the values of the root and of a nameless first-level node are
 *   not counted, as Pyroscope's reader (DeserializeNoDict, Iterate) has
 *   it.  Truncated input is SM_EMALFORMED.
 *
 * Every value is multiplied by `scale` (the period for cpu/wall with a
 * sample rate, else 1); an overflow is SM_EMALFORMED.  Stacks deeper than
 * limits->max_depth keep their root frames.
 */
#ifndef DIST_FOLDED_H
#define DIST_FOLDED_H

#include "batch.h"

int dist_folded_parse(const uint8_t *body, size_t len, struct dist_batch *b,
    uint32_t series, int64_t scale, struct sm_err *err);

int dist_lines_parse(const uint8_t *body, size_t len, struct dist_batch *b,
    uint32_t series, int64_t scale, struct sm_err *err);

int dist_trie_parse(const uint8_t *body, size_t len, struct dist_batch *b,
    uint32_t series, int64_t scale, struct sm_err *err);

int dist_tree_parse(const uint8_t *body, size_t len, struct dist_batch *b,
    uint32_t series, int64_t scale, struct sm_err *err);

/*
 * Decode text per the rules above into UTF-8 without BOM.  When no
 * transcoding is needed *out points into `body`; otherwise into the arena.
 * Returns 0, SM_ENOMEM, or SM_EMALFORMED (odd-length UTF-16).
 */
int dist_text_decode(const uint8_t *body, size_t len, struct sm_arena *a,
    const char **out, size_t *outlen, struct sm_err *err);

#endif /* DIST_FOLDED_H */
