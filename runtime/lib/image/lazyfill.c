/* One span into the data file (lazy_int.h): its compressed bytes, widened
 * to SHA-256's blocks, are checked against the chaining states the index
 * recorded at both ends (or the layer's digest, at the blob's end) before
 * anything is done with them; then inflated from the span's checkpoint (a
 * gzip member's header; or raw deflate from a block boundary, its first
 * byte's unused bits primed and the window set as the dictionary) and
 * written at the span's place in the data file. Output that is all zeros
 * is not written: the data file is sparse, and an image's zero-filled
 * files cost no disk. */
#include "lazy_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fdio.h"
#include "sha256mid.h"

#define OUT_CHUNK (1u << 20)

static bool all_zero(const unsigned char *p, size_t n)
{
    static const unsigned char zero[4096];
    while (n) {
        size_t k = n < sizeof(zero) ? n : sizeof(zero);
        if (memcmp(p, zero, k))
            return false;
        p += k;
        n -= k;
    }
    return true;
}

int lz_span_check(const struct lz_index *ix, const struct lz_span *s, const unsigned char *c, size_t n)
{
    uint64_t from = lz_span_wstart(s), to = lz_span_wend(s, ix->csize);
    if (n != to - from)
        return -1;
    if (to == ix->csize)
        return skiff_sha256mid_check_end(s->hstart, from, c, n, ix->sha);
    return skiff_sha256mid_check(s->hstart, from, c, n, s->hend);
}

int lz_fill_span(struct lz_image *im, uint32_t g, const unsigned char *cbytes, size_t clen, skiff_err *err)
{
    uint32_t layer;
    const struct lz_span *s = lz_image_span(im, g, &layer);
    const struct lz_layer *l = &im->layers[layer];
    if (lz_span_check(&l->ix, s, cbytes, clen) < 0)
        return lz_error(
            err, EBADMSG, "layer %s: bytes %llu-%llu are not what the index recorded (corrupt or tampered data)",
            l->ix.digest, (unsigned long long)lz_span_wstart(s), (unsigned long long)lz_span_wend(s, l->ix.csize));
    size_t fetched = clen;
    /* the span's own bytes, inside the checked range */
    cbytes += s->cstart - lz_span_wstart(s);
    clen = (size_t)(s->cend - s->cstart);
    unsigned char *win = NULL, *out = malloc(OUT_CHUNK);
    z_stream z;
    memset(&z, 0, sizeof(z));
    bool zinit = false, raw = s->kind == LZ_SPAN_RAW;
    int rv = -1;
    if (!out) {
        skiff_error(err, ENOMEM, "lazy fill");
        goto out;
    }
    if (inflateInit2(&z, raw ? -15 : 31) != Z_OK) {
        skiff_error(err, ENOMEM, "inflateInit");
        goto out;
    }
    zinit = true;
    z.next_in = (unsigned char *)(uintptr_t)cbytes;
    z.avail_in = (uInt)clen;
    if (raw) {
        win = malloc(LZ_WINDOW);
        int wl = win ? lz_index_window(&l->ix, g - l->span0, win, err) : -1;
        if (!win)
            skiff_error(err, ENOMEM, "lazy fill");
        if (wl < 0)
            goto out;
        if (s->bits) {
            if (inflatePrime(&z, s->bits, cbytes[0] >> (8 - s->bits)) != Z_OK)
                goto corrupt;
            z.next_in++;
            z.avail_in--;
        }
        if (wl > 0 && inflateSetDictionary(&z, win, (uInt)wl) != Z_OK)
            goto corrupt;
    }
    uint64_t want = s->uend - s->ustart, done = 0;
    while (done < want) {
        size_t room = want - done < OUT_CHUNK ? (size_t)(want - done) : OUT_CHUNK;
        z.next_out = out;
        z.avail_out = (uInt)room;
        int zr = inflate(&z, Z_NO_FLUSH);
        size_t made = room - z.avail_out;
        if (made && !all_zero(out, made) && skiff_write_all_at(im->datafd, out, made, l->base + s->ustart + done) < 0) {
            skiff_error(err, errno, "write the lazy data file%s",
                        errno == ENOSPC || errno == EDQUOT ? " (lazy_path's disk is full)" : "");
            goto out;
        }
        done += made;
        if (zr == Z_STREAM_END && done < want) {
            /* a gzip member ends inside the span: the next one's header
             * follows its trailer (8 bytes, which raw inflation left) */
            if (raw) {
                if (z.avail_in < 8)
                    goto corrupt;
                z.next_in += 8;
                z.avail_in -= 8;
            }
            if (inflateReset2(&z, 31) != Z_OK)
                goto corrupt;
            raw = false;
            continue;
        }
        if (zr != Z_OK && zr != Z_STREAM_END && !(zr == Z_BUF_ERROR && made))
            goto corrupt;
        if (!made && z.avail_in == 0)
            goto corrupt;
    }
    lz_image_set_present(im, g, fetched);
    rv = 0;
    goto out;
corrupt:
    lz_error(err, EIO, "layer %s: span %u does not inflate to what the index recorded", l->ix.digest, g - l->span0);
out:
    if (zinit)
        inflateEnd(&z);
    free(win);
    free(out);
    return rv;
}
