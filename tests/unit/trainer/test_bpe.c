/* GPT-2's BPE (trainer/bpe.c) without the real vocabulary: the pre-split on
 * hand-checked cases, the merge loop against a plain reimplementation of the
 * reference encoder's loop on random vocabularies, the file checks, and the
 * import from encoder.json + vocab.bpe. (The real vocabulary against the
 * real reference encoder: tests/integration/trainer-gpt2-bpe.sh.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bpe.h"

/* ---- pre-split -------------------------------------------------------------- */

/* The pieces of text joined by '|'. */
static void split(const char *text, char *out)
{
    size_t len = strlen(text), pos = 0;
    out[0] = '\0';
    while (pos < len) {
        size_t e = bpe_presplit(text, len, pos);
        cr_assert(e > pos && e <= len);
        if (pos)
            strcat(out, "|");
        strncat(out, text + pos, e - pos);
        pos = e;
    }
}

Test(bpe, presplit_follows_gpt2s_expression)
{
    static const char *cases[][2] = {
        {"Hello world", "Hello| world"},
        {"don't we'll I'm", "don|'t| we|'ll| I|'m"},
        {"DON'T", "DON|'|T"}, /* contractions are lower case only */
        {"''s 'sam", "''|s| '|sam"},
        {"a  b", "a| | b"}, /* a space run gives its last space to the word */
        {"a\n\nb", "a|\n|\n|b"},
        {"x   ", "x|   "}, /* at the end the run stays whole */
        {" 123 4.5", " 123| 4|.|5"},
        {"abc123def", "abc|123|def"},
        {"!!! ?", "!!!| ?"},
        {"\t\tx", "\t|\t|x"},                                      /* only U+0020 joins the word after it */
        {"caf\xc3\xa9 na\xc3\xafve", "caf\xc3\xa9| na\xc3\xafve"}, /* é, ï: letters */
        {"\xe2\x85\xab x\xc2\xb2", "\xe2\x85\xab| x|\xc2\xb2"},    /* Ⅻ (Nl), ² (No) */
        {"a\xc2\xa0\xc2\xa0"
         "b",
         "a|\xc2\xa0|\xc2\xa0|b"}, /* NBSP is \s */
        {"a \xc2\x85"
         "b",
         "a| \xc2\x85|b"}, /* NEL is not */
        {"\xf0\x9f\x98\x80\xf0\x9f\x98\x80 ok", "\xf0\x9f\x98\x80\xf0\x9f\x98\x80| ok"},
        {"a\xff\xfe"
         "b",
         "a|\xff\xfe|b"}, /* invalid bytes */
        {" \xff", " \xff"},
    };
    char got[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        split(cases[i][0], got);
        cr_expect_str_eq(got, cases[i][1], "split of case %zu", i);
    }
}

/* ---- a vocabulary in memory ---------------------------------------------------- */

#define MAXTOK 4096
struct vocab {
    unsigned char tok[MAXTOK][64];
    uint32_t len[MAXTOK];
    uint32_t n, eot;
    uint32_t rule[MAXTOK][3];
    uint32_t nrules;
};

static void v_bytes(struct vocab *v)
{
    memset(v, 0, sizeof *v);
    for (int c = 0; c < 256; c++) {
        v->tok[c][0] = (unsigned char)c;
        v->len[c] = 1;
    }
    memcpy(v->tok[256], "<|endoftext|>", 13);
    v->len[256] = 13;
    v->eot = 256;
    v->n = 257;
}

static int v_find(const struct vocab *v, const unsigned char *s, size_t n)
{
    for (uint32_t i = 0; i < v->n; i++)
        if (v->len[i] == n && !memcmp(v->tok[i], s, n))
            return (int)i;
    return -1;
}

/* adds the rule left+right (and the token, when new); 0 if it exists */
static int v_rule(struct vocab *v, uint32_t l, uint32_t r)
{
    for (uint32_t k = 0; k < v->nrules; k++)
        if (v->rule[k][0] == l && v->rule[k][1] == r)
            return 0;
    unsigned char s[128];
    size_t n = v->len[l] + v->len[r];
    if (n > 60 || v->n >= MAXTOK)
        return 0;
    memcpy(s, v->tok[l], v->len[l]);
    memcpy(s + v->len[l], v->tok[r], v->len[r]);
    int id = v_find(v, s, n);
    if (id < 0) {
        id = (int)v->n++;
        memcpy(v->tok[id], s, n);
        v->len[id] = (uint32_t)n;
    }
    v->rule[v->nrules][0] = l;
    v->rule[v->nrules][1] = r;
    v->rule[v->nrules][2] = (uint32_t)id;
    v->nrules++;
    return 1;
}

/* The compact file image (bpe.h's layout). */
static unsigned char *v_image(const struct vocab *v, size_t *size)
{
    size_t text = 0;
    for (uint32_t i = 0; i < v->n; i++)
        text += v->len[i];
    size_t pad = (text + 3) & ~(size_t)3;
    *size = 32 + 4 * (v->n + 1) + pad + 12 * v->nrules;
    unsigned char *img = calloc(1, *size);
    memcpy(img, "SKIFFBPE", 8);
    uint32_t h[6] = {1, v->n, v->nrules, v->eot, (uint32_t)text, 0};
    memcpy(img + 8, h, sizeof h);
    uint32_t o = 0;
    unsigned char *t = img + 32 + 4 * (v->n + 1);
    for (uint32_t i = 0; i <= v->n; i++) {
        memcpy(img + 32 + 4 * i, &o, 4);
        if (i < v->n) {
            memcpy(t + o, v->tok[i], v->len[i]);
            o += v->len[i];
        }
    }
    memcpy(t + pad, v->rule, 12 * v->nrules);
    return img;
}

static struct bpe *v_load(const struct vocab *v)
{
    size_t size;
    unsigned char *img = v_image(v, &size);
    skiff_err err = {0};
    struct bpe *b = bpe_load_mem(img, size, &err);
    free(img);
    cr_assert_not_null(b, "%s", err.msg);
    return b;
}

/* The reference encoder's loop on one piece, written plainly: take the
 * lowest-ranked adjacent pair, join all its occurrences left to right. */
static size_t naive(const struct vocab *v, const unsigned char *s, size_t n, uint16_t *out)
{
    int w[512];
    size_t k = n;
    for (size_t i = 0; i < n; i++)
        w[i] = v_find(v, s + i, 1);
    for (;;) {
        uint32_t best = UINT32_MAX;
        for (size_t i = 0; i + 1 < k; i++)
            for (uint32_t r = 0; r < v->nrules && r < best; r++)
                if (v->rule[r][0] == (uint32_t)w[i] && v->rule[r][1] == (uint32_t)w[i + 1])
                    best = r;
        if (best == UINT32_MAX)
            break;
        size_t j = 0;
        for (size_t i = 0; i < k;) {
            if (i + 1 < k && w[i] == (int)v->rule[best][0] && w[i + 1] == (int)v->rule[best][1]) {
                w[j++] = (int)v->rule[best][2];
                i += 2;
            } else {
                w[j++] = w[i++];
            }
        }
        k = j;
    }
    for (size_t i = 0; i < k; i++)
        out[i] = (uint16_t)w[i];
    return k;
}

static uint64_t rs = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs % n);
}

Test(bpe, merges_match_the_reference_loop_on_random_vocabularies)
{
    static struct vocab v;
    const char alpha[] = "abcab";
    for (int trial = 0; trial < 20; trial++) {
        v_bytes(&v);
        /* rules over tokens of the alphabet, then ranks shuffled: a rule may
         * use a token that a later-ranked rule makes, as the reference allows */
        while (v.nrules < 300) {
            uint32_t cand[MAXTOK], nc = 0;
            for (uint32_t i = 0; i < v.n; i++)
                if (i != v.eot && (v.len[i] > 1 || strchr("abc", v.tok[i][0])))
                    cand[nc++] = i;
            v_rule(&v, cand[rnd(nc)], cand[rnd(nc)]);
        }
        for (uint32_t i = v.nrules - 1; i > 0; i--) {
            uint32_t j = rnd(i + 1), t[3];
            memcpy(t, v.rule[i], sizeof t);
            memcpy(v.rule[i], v.rule[j], sizeof t);
            memcpy(v.rule[j], t, sizeof t);
        }
        struct bpe *b = v_load(&v);
        for (int s = 0; s < 200; s++) {
            unsigned char piece[400];
            size_t n = 2 + rnd(s < 190 ? 30 : 398);
            for (size_t i = 0; i < n; i++)
                piece[i] = (unsigned char)alpha[rnd(5)];
            uint16_t want[512], *got = NULL;
            size_t nw = naive(&v, piece, n, want), ng = 0, cap = 0;
            skiff_err err;
            /* the alphabet has no spaces or punctuation: one piece */
            cr_assert_eq(bpe_encode(b, (const char *)piece, n, &got, &ng, &cap, &err), 0);
            cr_assert_eq(ng, nw, "trial %d string %d (%zu bytes): %zu tokens, reference %zu", trial, s, n, ng, nw);
            cr_assert(!memcmp(got, want, nw * sizeof *want), "trial %d string %d differs", trial, s);
            /* again: this time from the cache */
            ng = 0;
            cr_assert_eq(bpe_encode(b, (const char *)piece, n, &got, &ng, &cap, &err), 0);
            cr_assert(ng == nw && !memcmp(got, want, nw * sizeof *want));
            free(got);
        }
        bpe_free(b);
    }
}

Test(bpe, a_long_piece_is_not_quadratic)
{
    static struct vocab v;
    v_bytes(&v);
    uint32_t sp = ' ';
    /* spaces join in pairs, pairs in fours, ... like GPT-2's space tokens */
    uint32_t t = sp;
    for (int i = 0; i < 5; i++) {
        v_rule(&v, t, t);
        t = v.rule[v.nrules - 1][2];
    }
    struct bpe *b = v_load(&v);
    size_t n = 4 << 20;
    char *text = malloc(n);
    memset(text, ' ', n);
    uint16_t *out = NULL;
    size_t k = 0, cap = 0;
    skiff_err err;
    cr_assert_eq(bpe_encode(b, text, n, &out, &k, &cap, &err), 0, "%s", err.msg);
    cr_assert_eq(k, n / 32, "4 MiB of spaces in 32-space tokens");
    free(out);
    free(text);
    bpe_free(b);
}

Test(bpe, decode_inverts_encode_on_any_bytes)
{
    static struct vocab v;
    v_bytes(&v);
    v_rule(&v, 'a', 'b');
    v_rule(&v, ' ', 'a');
    struct bpe *b = v_load(&v);
    unsigned char text[3000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (unsigned char)rnd(256);
    uint16_t *out = NULL;
    size_t k = 0, cap = 0;
    skiff_err err;
    cr_assert_eq(bpe_encode(b, (const char *)text, sizeof text, &out, &k, &cap, &err), 0);
    unsigned char back[3000];
    size_t at = 0;
    for (size_t i = 0; i < k; i++) {
        size_t len;
        const unsigned char *s = bpe_token(b, out[i], &len);
        cr_assert_not_null(s);
        cr_assert_neq(out[i], bpe_eot(b), "encoding never emits EOT");
        cr_assert(at + len <= sizeof back);
        memcpy(back + at, s, len);
        at += len;
    }
    cr_assert(at == sizeof text && !memcmp(back, text, at));
    free(out);
    bpe_free(b);
}

/* ---- file checks ------------------------------------------------------------------ */

static void expect_refused(unsigned char *img, size_t size, const char *what)
{
    skiff_err err = {0};
    struct bpe *b = bpe_load_mem(img, size, &err);
    cr_expect_null(b, "accepted: %s", what);
    cr_expect(strstr(err.msg, what) != NULL, "message '%s' lacks '%s'", err.msg, what);
    bpe_free(b);
}

Test(bpe, bad_files_are_refused_with_the_reason)
{
    static struct vocab v;
    v_bytes(&v);
    v_rule(&v, 'a', 'b');
    v_rule(&v, 'b', 'c');
    size_t size;
    unsigned char *img = v_image(&v, &size);
    skiff_err err;
    struct bpe *ok = bpe_load_mem(img, size, &err);
    cr_assert_not_null(ok, "%s", err.msg);
    bpe_free(ok);

    unsigned char *c = malloc(size);
#define MUTATE(off, val, what)                                                                                         \
    do {                                                                                                               \
        memcpy(c, img, size);                                                                                          \
        uint32_t x_ = (val);                                                                                           \
        memcpy(c + (off), &x_, 4);                                                                                     \
        expect_refused(c, size, what);                                                                                 \
    } while (0)
    memcpy(c, img, size);
    c[0] = 'X';
    expect_refused(c, size, "not a skiff BPE file");
    expect_refused(img, size - 4, "truncated");
    expect_refused(img, 10, "not a skiff BPE file");
    MUTATE(8, 2, "version 2");
    MUTATE(12, 100, "vocabulary of 100");
    MUTATE(20, 5000, "out of range");
    MUTATE(28, 1, "reserved");
    size_t rules = size - 12 * v.nrules;
    MUTATE(rules + 8, 'x', "is not tokens"); /* rule 0's result */
    memcpy(c, img, size);
    memcpy(c + rules + 12, c + rules, 12); /* rule 1 = rule 0 */
    expect_refused(c, size, "repeats rule 0");
    MUTATE(rules, 256, "end-of-text");             /* a rule naming EOT */
    MUTATE(32 + 4 * 1, 0, "has 0 bytes");          /* token 0 empty */
    MUTATE(32 + 4 * 1, 100000, "inside the text"); /* token 0 past the text (found by fuzzing) */
#undef MUTATE
    /* token 'b' (98) spelled 'a': two tokens with the same bytes, and no
     * token for byte b */
    memcpy(c, img, size);
    c[32 + 4 * (v.n + 1) + 98] = 'a';
    expect_refused(c, size, "the same bytes");
    free(c);
    free(img);

    v_bytes(&v);
    memcpy(v.tok['z'], "zz", 2); /* no one-byte token for 'z' */
    v.len['z'] = 2;
    img = v_image(&v, &size);
    expect_refused(img, size, "no token for byte 0x7a");
    free(img);
    v.tok[256][0] = 'z'; /* ... and the end-of-text token is 'z' */
    v.len[256] = 1;
    img = v_image(&v, &size);
    expect_refused(img, size, "is a one-byte token");
    free(img);
}

/* ---- import ------------------------------------------------------------------------ */

/* GPT-2's byte -> character table, written here independently of bpe.c */
static int byte_char(int b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        return b;
    int n = 0;
    for (int c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE))
            n++;
    return 256 + n;
}

static void put_utf8(FILE *f, int cp)
{
    if (cp < 0x80)
        fputc(cp, f);
    else
        fprintf(f, "%c%c", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F));
}

static void json_key(FILE *f, int b)
{
    int cp = byte_char(b);
    fputc('"', f);
    if (cp == '"' || cp == '\\')
        fputc('\\', f);
    put_utf8(f, cp);
    fputc('"', f);
}

Test(bpe, import_converts_encoder_json_and_vocab_bpe)
{
    char dir[] = "/tmp/skiff-bpe-test-XXXXXX", enc[64], mer[64], out[64], bad[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(mer, sizeof mer, "%s/vocab.bpe", dir);
    snprintf(bad, sizeof bad, "%s/bad.bpe", dir);
    snprintf(out, sizeof out, "%s/gpt2-bpe.bin", dir);
    FILE *f = fopen(enc, "w");
    fputs("{", f);
    for (int b = 0; b < 256; b++) {
        json_key(f, b);
        fprintf(f, ": %d, ", b);
    }
    /* "\u0120" is written escaped, as Python's json.dump writes it */
    fputs("\"\\u0120t\": 256, \"he\": 257, \"\\u0120the\": 258, \"<|endoftext|>\": 259}", f);
    fclose(f);
    f = fopen(mer, "w");
    fputs("#version: 0.2\n\xc4\xa0 t\nh e\n\xc4\xa0t he\n", f);
    fclose(f);
    skiff_err err = {0};
    cr_assert_eq(bpe_import(enc, mer, out, &err), 0, "%s", err.msg);
    struct bpe *b = bpe_load(out, &err);
    cr_assert_not_null(b, "%s", err.msg);
    cr_assert_eq(bpe_vocab_size(b), 260);
    cr_assert_eq(bpe_eot(b), 259);
    uint16_t *t = NULL;
    size_t n = 0, cap = 0;
    cr_assert_eq(bpe_encode(b, " the the", 8, &t, &n, &cap, &err), 0);
    cr_assert_eq(n, 2);
    cr_expect(t[0] == 258 && t[1] == 258, "' the the' -> %u %u", t[0], t[1]);
    n = 0;
    bpe_encode(b, "the", 3, &t, &n, &cap, &err);
    cr_expect(n == 2 && t[0] == 't' && t[1] == 257, "'the' -> %zu tokens %u %u", n, t[0], n > 1 ? t[1] : 0);
    free(t);
    bpe_free(b);

    f = fopen(bad, "w");
    fputs("#version: 0.2\nq z\n", f); /* "qz" is not a token */
    fclose(f);
    cr_expect_eq(bpe_import(enc, bad, out, &err), -1);
    cr_expect(strstr(err.msg, "not in the vocabulary") != NULL, "%s", err.msg);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
