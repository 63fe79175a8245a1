/* UTF-8 helpers for the tokenizer: strict validation and decoding (RFC 3629: no overlongs,
 * no surrogates, nothing above U+10FFFF), llama.cpp's lead-byte length rule used to split
 * text into SentencePiece symbols, Python's notion of whitespace (for the chat template's
 * `trim`), and an incremental decoder that only ever emits complete, valid sequences.
 *
 * The incremental decoder works on a caller-owned pending buffer so that the streaming
 * detokenizer (ls_detok_state in tokenizer.h) can hold the tail of a code point that was
 * split across byte-fallback tokens without allocating. */
#ifndef LS_TOKENIZER_UTF8_H
#define LS_TOKENIZER_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the sequence a lead byte announces, by its high nibble, exactly as llama.cpp's
 * unicode_len_utf8 does (continuation bytes count as 1, 0xF8..0xFF as 4). It performs no
 * validation: SPM symbol splitting must reproduce llama.cpp even on invalid input. */
size_t ls_utf8_lead_len(uint8_t lead);

/* Decode one strictly valid code point at s[0..n). Returns its byte length (1..4) and sets
 * *cp, or 0 if the bytes there are not a complete valid sequence (n == 0 included). */
int ls_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* True when all n bytes are strictly valid UTF-8. */
bool ls_utf8_valid(const char *s, size_t n);

/* Python's str.isspace() for one code point (what Jinja's `trim` strips). */
bool ls_utf8_is_py_space(uint32_t cp);

/* Incremental decoding. `pending` holds at most 3 bytes of an unfinished sequence (the
 * caller zero-initializes *n_pending). Feeding bytes appends every completed valid sequence
 * to out; a sequence that turns out invalid is replaced by U+FFFD (one per maximal invalid
 * subpart, as WHATWG and Python's "replace" handler do). out == NULL only counts.
 * Returns the bytes produced (written when out != NULL); the caller checks capacity with a
 * counting pass first, so a real pass never overruns. Returns -1 if *n_pending is corrupt. */
int64_t ls_utf8_stream_feed(char pending[8], int *n_pending, const char *in, size_t n, bool unescape_spaces, char *out);
/* End of stream: an unfinished sequence becomes U+FFFD. Same return convention. */
int64_t ls_utf8_stream_flush(char pending[8], int *n_pending, char *out);

#endif
