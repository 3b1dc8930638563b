/*
 * strata: the installed command, a native client of the workspace's watcher.
 *
 * A served command (status, snapshot, rewind, draft start...) costs the
 * workspace's watcher a few milliseconds; a Python process spends 8 ms
 * starting before its client does anything. This program hands the command
 * to the watcher the way strata/_resident.py does (the same request, the same
 * protocol, see strata/store/watch.py) and prints what the watcher answers,
 * byte for byte, with its exit code. The watcher decides what it serves.
 *
 * An agent's hook (`strata hook claude-code|codex`, its message on stdin) is
 * handed over too: the message is read here and sent as `--payload=MESSAGE`
 * (the watcher has no stdin of ours); if strata-py runs it after all, the
 * message is put back on its stdin (a memfd).
 *
 * Whenever the watcher does not take the command (no workspace, no watcher,
 * a command it does not serve, `run`, an environment whose text
 * encodings this program does not work out exactly as Python would) it runs
 * the Python command, `strata-py` beside it, which does everything else:
 * nothing has been done by then. Once it has told the watcher "go" it never
 * falls back: a command is never run twice.
 *
 * STRATA_NO_NATIVE=1 skips this client (the Python one is used).
 * Built by setup.py when a C compiler is found; without one, `strata` is
 * the Python launcher (bin/strata) and works the same, only slower.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <langinfo.h>
#include <limits.h>
#include <locale.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef STRATA_VERSION
#error "build with -DSTRATA_VERSION=\"x.y.z\" (setup.py does)"
#endif

extern char **environ;

/* seconds to wait for "ready" (READY_TIMEOUT), and while another command runs */
#define READY_TIMEOUT 2
#define QUEUE_TIMEOUT 65
/* the protocol's limit on one request line */
#define MAX_REQUEST (1 << 20)

static char **g_argv;

/* ---- the Python command ------------------------------------------------ */

/* This program's own path: /proc/self/exe, else argv[0] (as given, or found on PATH). */
static int own_path(char *self, size_t size) {
    ssize_t n = readlink("/proc/self/exe", self, size - 1);
    if (n > 0) {
        self[n] = '\0';
        return 1;
    }
    const char *name = g_argv[0];
    if (!name || !*name)
        return 0;
    if (strchr(name, '/'))
        return snprintf(self, size, "%s", name) < (int)size;
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        if (len && snprintf(self, size, "%.*s/%s", (int)len, path, name) < (int)size &&
            access(self, X_OK) == 0)
            return 1;
        path = end ? end + 1 : NULL;
    }
    return 0;
}

/* The environment variable that tells strata-py the watcher did not answer in time:
 * it then neither hands the command over nor asks the watcher what changed
 * (strata._entry; the Python client does the same within one process). */
#define SILENT_WATCHER "STRATA_WATCHER_SILENT_"

/* An agent's hook message, read from stdin to hand it to the watcher (see main): when
 * strata-py runs the hook instead, it finds the message on its stdin again. */
static char *g_stdin_data;
static size_t g_stdin_len;
static int g_stdin_taken;

static void give_back_stdin(void) {
    if (!g_stdin_taken)
        return;
    int fd = memfd_create("strata-hook-message", 0);
    if (fd < 0)
        return; /* strata-py then reads an empty stdin and says the message is missing */
    size_t at = 0;
    while (at < g_stdin_len) {
        ssize_t n = write(fd, g_stdin_data + at, g_stdin_len - at);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            close(fd);
            return;
        }
        at += (size_t)n;
    }
    if (lseek(fd, 0, SEEK_SET) == 0)
        dup2(fd, 0);
    close(fd);
}

/* Run `strata-py` (beside this program) with our arguments; never returns. */
static void run_python(void) {
    give_back_stdin();
    char self[PATH_MAX];
    if (!own_path(self, sizeof self - 16)) {
        fprintf(stderr, "error: cannot find where this strata command is installed\n"
                        "hint: run strata-py, the Python command installed beside it\n");
        exit(1);
    }
    char *slash = strrchr(self, '/');
    strcpy(slash ? slash + 1 : self, "strata-py");
    g_argv[0] = self;
    execv(self, g_argv);
    fprintf(stderr,
            "error: cannot start %s: %s\n"
            "hint: this strata is the native client; it runs strata-py, the Python command "
            "installed beside it: run the strata of the environment Strata is installed in\n",
            self, strerror(errno));
    exit(1);
}

/* ---- growing buffers ------------------------------------------------------ */

struct buf {
    char *data;
    size_t len, cap;
};

static void buf_add(struct buf *b, const void *data, size_t len) {
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + len + 1)
            cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown) {
            fputs("error: out of memory\n", stderr);
            exit(1);
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

static void buf_str(struct buf *b, const char *s) { buf_add(b, s, strlen(s)); }

/* ---- JSON out: strings as Python decodes them -------------------------- */

/* The length of the well-formed UTF-8 sequence at s (as Python's decoder
 * accepts it: no overlong forms, no surrogates, nothing past U+10FFFF), or 0. */
static size_t utf8_length(const unsigned char *s, size_t left) {
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (left < need + 1)
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i <= need; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return need + 1;
}

/* `bytes`, as the JSON string of what Python decodes them to with
 * utf-8/surrogateescape (a byte it cannot decode becomes U+DC80 + byte). */
static void json_bytes(struct buf *b, const char *data, size_t len) {
    const unsigned char *s = (const unsigned char *)data;
    char esc[8];
    buf_add(b, "\"", 1);
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            buf_add(b, esc, 2);
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            buf_add(b, esc, 6);
            i++;
        } else if (c < 0x80) {
            buf_add(b, &s[i], 1);
            i++;
        } else {
            size_t n = utf8_length(s + i, len - i);
            if (n) {
                buf_add(b, &s[i], n);
                i += n;
            } else {
                snprintf(esc, sizeof esc, "\\udc%02x", c);
                buf_add(b, esc, 6);
                i++;
            }
        }
    }
    buf_add(b, "\"", 1);
}

static void json_cstr(struct buf *b, const char *s) { json_bytes(b, s, strlen(s)); }

/* ---- JSON in: the watcher's replies -------------------------------------- */

/* What a reply says (only what this client reads of it). */
struct reply {
    int v, ready, queued, done;
    int has_code;
    long code;
    long pid;
    struct buf chunks; /* what the command wrote, in order: [fd byte][8-byte length][bytes]... */
};

struct parser {
    const char *p, *end;
    int depth;
};

static int skip_ws(struct parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
    return ps->p < ps->end;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A JSON string whose characters are all below U+0100 (what a reply's text
 * is: the bytes a command wrote, one character each), as those bytes in
 * `into` (NULL: checked and skipped). 0 when it is not such a string. */
static int parse_latin1(struct parser *ps, struct buf *into) {
    if (ps->p >= ps->end || *ps->p != '"')
        return 0;
    ps->p++;
    while (ps->p < ps->end) {
        const char *run = ps->p;
        while (ps->p < ps->end && *ps->p != '"' && *ps->p != '\\' && (unsigned char)*ps->p >= 0x20 &&
               (unsigned char)*ps->p < 0x80)
            ps->p++;
        if (into && ps->p > run)
            buf_add(into, run, (size_t)(ps->p - run));
        if (ps->p >= ps->end)
            return 0;
        char c = *ps->p++;
        if (c == '"')
            return 1;
        if (c != '\\' || ps->p >= ps->end)
            return 0; /* a control character, or a character past ASCII written raw */
        char e = *ps->p++, out;
        switch (e) {
        case '"': out = '"'; break;
        case '\\': out = '\\'; break;
        case '/': out = '/'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'n': out = '\n'; break;
        case 'r': out = '\r'; break;
        case 't': out = '\t'; break;
        case 'u': {
            if (ps->end - ps->p < 4)
                return 0;
            int code = 0;
            for (int i = 0; i < 4; i++) {
                int h = hexval(ps->p[i]);
                if (h < 0)
                    return 0;
                code = code * 16 + h;
            }
            ps->p += 4;
            if (code > 0xFF)
                return 0;
            out = (char)code;
            break;
        }
        default:
            return 0;
        }
        if (into)
            buf_add(into, &out, 1);
    }
    return 0;
}

/* Any JSON string (its characters unread). */
static int skip_string(struct parser *ps) {
    if (ps->p >= ps->end || *ps->p != '"')
        return 0;
    ps->p++;
    while (ps->p < ps->end) {
        char c = *ps->p++;
        if (c == '"')
            return 1;
        if (c == '\\') {
            if (ps->p >= ps->end)
                return 0;
            ps->p++;
        } else if ((unsigned char)c < 0x20)
            return 0;
    }
    return 0;
}

static int parse_long(struct parser *ps, long *value) {
    const char *start = ps->p;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    const char *digits = ps->p;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
        ps->p++;
    if (ps->p == digits || ps->p - start > 18)
        return 0;
    if (ps->p < ps->end && (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E'))
        return 0; /* not an integer */
    char text[24];
    memcpy(text, start, (size_t)(ps->p - start));
    text[ps->p - start] = '\0';
    *value = strtol(text, NULL, 10);
    return 1;
}

static int skip_value(struct parser *ps);

static int skip_container(struct parser *ps, char close) {
    if (++ps->depth > 64)
        return 0;
    ps->p++; /* the opening bracket */
    if (!skip_ws(ps))
        return 0;
    if (*ps->p == close) {
        ps->p++;
        ps->depth--;
        return 1;
    }
    for (;;) {
        if (close == '}') {
            if (!skip_ws(ps) || !skip_string(ps) || !skip_ws(ps) || *ps->p++ != ':')
                return 0;
        }
        if (!skip_value(ps) || !skip_ws(ps))
            return 0;
        char c = *ps->p++;
        if (c == close) {
            ps->depth--;
            return 1;
        }
        if (c != ',')
            return 0;
    }
}

static int literal(struct parser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return 0;
    ps->p += n;
    return 1;
}

static int skip_value(struct parser *ps) {
    if (!skip_ws(ps))
        return 0;
    char c = *ps->p;
    if (c == '{')
        return skip_container(ps, '}');
    if (c == '[')
        return skip_container(ps, ']');
    if (c == '"')
        return skip_string(ps);
    if (c == 't')
        return literal(ps, "true");
    if (c == 'f')
        return literal(ps, "false");
    if (c == 'n')
        return literal(ps, "null");
    if (c == '-' || (c >= '0' && c <= '9')) {
        ps->p++;
        while (ps->p < ps->end && strchr("0123456789.eE+-", *ps->p))
            ps->p++;
        return 1;
    }
    return 0;
}

/* true / false / anything else: 1 / 0 / 0, the value skipped. */
static int parse_bool(struct parser *ps) {
    if (literal(ps, "true"))
        return 1;
    skip_value(ps);
    return 0;
}

static void chunk_add(struct buf *chunks, int fd, const char *data, size_t len) {
    unsigned char head[9];
    head[0] = (unsigned char)fd;
    uint64_t n = len;
    memcpy(head + 1, &n, 8);
    buf_add(chunks, head, 9);
    buf_add(chunks, data, len);
}

/* "output": [[fd, "text"], ...] */
static int parse_output(struct parser *ps, struct reply *r) {
    if (!skip_ws(ps) || *ps->p != '[')
        return 0;
    ps->p++;
    if (!skip_ws(ps))
        return 0;
    if (*ps->p == ']') {
        ps->p++;
        return 1;
    }
    struct buf text = {0};
    for (;;) {
        long fd;
        text.len = 0;
        if (!skip_ws(ps) || *ps->p++ != '[' || !skip_ws(ps) || !parse_long(ps, &fd) ||
            !skip_ws(ps) || *ps->p++ != ',' || !skip_ws(ps) || !parse_latin1(ps, &text) ||
            !skip_ws(ps) || *ps->p++ != ']' || !skip_ws(ps)) {
            free(text.data);
            return 0;
        }
        chunk_add(&r->chunks, fd == 1 ? 1 : 2, text.data ? text.data : "", text.len);
        char c = *ps->p++;
        if (c == ']')
            break;
        if (c != ',') {
            free(text.data);
            return 0;
        }
    }
    free(text.data);
    return 1;
}

/* One reply line: a JSON object. 0 when it is not one. */
static int parse_reply(const char *line, size_t len, struct reply *r) {
    struct parser ps = {line, line + len, 0};
    memset(r, 0, sizeof *r);
    r->v = -1;
    if (!skip_ws(&ps) || *ps.p++ != '{' || !skip_ws(&ps))
        return 0;
    if (*ps.p == '}')
        return 1;
    for (;;) {
        struct buf key = {0};
        if (!skip_ws(&ps) || !parse_latin1(&ps, &key) || !skip_ws(&ps) || *ps.p++ != ':' ||
            !skip_ws(&ps)) {
            free(key.data);
            return 0;
        }
        const char *k = key.data ? key.data : "";
        int ok = 1;
        long n;
        if (!strcmp(k, "v"))
            ok = parse_long(&ps, &n) ? (r->v = (int)n, 1) : skip_value(&ps);
        else if (!strcmp(k, "ready"))
            r->ready = parse_bool(&ps);
        else if (!strcmp(k, "queued"))
            r->queued = parse_bool(&ps);
        else if (!strcmp(k, "done"))
            r->done = parse_bool(&ps);
        else if (!strcmp(k, "code")) {
            const char *at = ps.p;
            if (parse_long(&ps, &n)) {
                r->has_code = 1;
                r->code = n;
            } else {
                ps.p = at;
                ok = skip_value(&ps);
            }
        } else if (!strcmp(k, "pid")) {
            const char *at = ps.p;
            if (parse_long(&ps, &n))
                r->pid = n;
            else {
                ps.p = at;
                ok = skip_value(&ps);
            }
        } else if (!strcmp(k, "output"))
            ok = parse_output(&ps, r);
        else
            ok = skip_value(&ps);
        free(key.data);
        if (!ok || !skip_ws(&ps))
            return 0;
        char c = *ps.p++;
        if (c == '}')
            break;
        if (c != ',')
            return 0;
    }
    return !skip_ws(&ps); /* nothing after the object */
}

/* ---- the exchange with the watcher ----------------------------------------- */

/* set when a read or write on the socket timed out: the watcher is stuck or busy */
static int g_timed_out;

static void set_timeout(int sock, int seconds) {
    struct timeval tv = {seconds, 0};
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static int send_all(int sock, const char *data, size_t len) {
    while (len) {
        ssize_t n = send(sock, data, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                g_timed_out = 1;
            return 0;
        }
        data += n;
        len -= (size_t)n;
    }
    return 1;
}

/* Read up to and including a newline into `line` (what follows it is kept in
 * `rest`). Descriptors sent along are closed (a served command sends none).
 * 0 on end of stream, timeout or error. */
static int read_line(int sock, struct buf *line, struct buf *rest) {
    line->len = 0;
    if (rest->len) {
        buf_add(line, rest->data, rest->len);
        rest->len = 0;
    }
    char chunk[65536];
    union {
        char space[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } control;
    size_t scanned = 0; /* a long reply (a large diff) is searched once, not once a chunk */
    for (;;) {
        char *nl = line->len > scanned ? memchr(line->data + scanned, '\n', line->len - scanned)
                                       : NULL;
        scanned = line->len;
        if (nl) {
            size_t keep = (size_t)(nl - line->data) + 1;
            buf_add(rest, nl + 1, line->len - keep);
            line->len = keep;
            return 1;
        }
        struct iovec iov = {chunk, sizeof chunk};
        struct msghdr msg = {0};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.space;
        msg.msg_controllen = sizeof control.space;
        ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            g_timed_out = 1;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); n >= 0 && c; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < count; i++) {
                    int fd;
                    memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                    close(fd);
                }
            }
        }
        if (n <= 0)
            return 0;
        buf_add(line, chunk, (size_t)n);
    }
}

/* ---- Ctrl-C, as the Python client reports it --------------------------------- */

static char g_interrupted[512] = "error: interrupted\n";

/* --json among the command's own arguments (before "--"), as the command line reads it */
static int wants_json(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            return 0;
        if (!strcmp(argv[i], "--json"))
            return 1;
    }
    return 0;
}

/* an error as the command line prints it: "error:"/"hint:" lines, or one JSON line under
 * --json (message and hint hold nothing JSON must escape: ASCII words, quotes, a pid) */
static void error_text(char *out, size_t size, int json, const char *type, const char *message,
                       const char *hint) {
    if (json)
        snprintf(out, size,
                 "{\"schema\": 1, \"error\": {\"type\": \"%s\", \"message\": \"%s\", "
                 "\"hint\": %s%s%s}}\n",
                 type, message, hint ? "\"" : "", hint ? hint : "null", hint ? "\"" : "");
    else
        snprintf(out, size, "error: %s\n%s%s%s", message, hint ? "hint: " : "", hint ? hint : "",
                 hint ? "\n" : "");
}

static void on_interrupt(int sig) {
    (void)sig;
    ssize_t ignored = write(2, g_interrupted, strlen(g_interrupted));
    (void)ignored;
    _exit(130);
}

/* ---- the workspace --------------------------------------------------------- */

static void strip(char *s) {
    size_t n = strlen(s);
    while (n && strchr(" \t\n\r\v\f", s[n - 1]))
        s[--n] = '\0';
    size_t i = strspn(s, " \t\n\r\v\f");
    memmove(s, s + i, n - i + 1);
}

/* A small text file's content, stripped (NULL: unreadable, empty or too big). */
static char *read_small(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char text[PATH_MAX + 64];
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0 || (size_t)n >= sizeof text - 1)
        return NULL;
    text[n] = '\0';
    if (strlen(text) != (size_t)n)
        return NULL;
    strip(text);
    return *text ? strdup(text) : NULL;
}

static int all_ascii(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80)
            return 0;
    return 1;
}

static int valid_utf8(const char *s) {
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        size_t n = utf8_length((const unsigned char *)s + i, len - i);
        if (!n)
            return 0;
        i += n;
    }
    return 1;
}

/* printf into `dst` (of size PATH_BUF); 0 when it does not fit. */
#define PATH_BUF (2 * PATH_MAX)
static int path_of(char *dst, const char *format, ...) __attribute__((format(printf, 2, 3)));
static int path_of(char *dst, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int n = vsnprintf(dst, PATH_BUF, format, args);
    va_end(args);
    return n >= 0 && n < PATH_BUF;
}

/* The watcher's socket for the workspace holding `cwd`, found as
 * strata/_resident.py finds it (NULL: none). */
static char *find_socket(const char *cwd) {
    char folder[PATH_MAX];
    if (!realpath(cwd, folder))
        return NULL;
    char repo[PATH_BUF], path[PATH_BUF];
    for (;;) {
        const char *base = strcmp(folder, "/") ? folder : "";
        struct stat st;
        if (!path_of(path, "%s/.strata", base))
            return NULL;
        if (lstat(path, &st) == 0) {
            if (S_ISDIR(st.st_mode)) {
                strcpy(repo, path);
                break;
            }
            char *text = read_small(path); /* a link to a folder: read_small fails */
            int ok = text && !strncmp(text, "strata-dir: ", 12) && valid_utf8(text) &&
                     path_of(repo, "%s", text + 12);
            free(text);
            if (!ok)
                return NULL;
            break;
        }
        if (!path_of(path, "%s/.git/strata/repo/config.toml", base))
            return NULL;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            path_of(repo, "%s/.git/strata/repo", base);
            break;
        }
        if (!*base)
            return NULL;
        char *slash = strrchr(folder, '/');
        if (slash == folder)
            folder[1] = '\0';
        else
            *slash = '\0';
    }
    struct stat st;
    if (!path_of(path, "%s/watch/watch.sock", repo) || strlen(path) >= 100 || stat(path, &st) != 0)
        return NULL;
    return strdup(path);
}

/* ---- text encodings, as Python's start-up works them out ------------------- */

/* Python's encodings for stdout and stderr in this environment, or 0 when this
 * program cannot tell them (the Python client is used then). The file system
 * encoding is utf-8/surrogateescape in every case taken here. `coerce` is set
 * when Python would add LC_CTYPE=C.UTF-8 to its environment (PEP 538). */
static int stream_errors(const char **out_errors, int *coerce) {
    static const char *const unknowns[] = {"PYTHONIOENCODING", "PYTHONUTF8", "PYTHONCOERCECLOCALE",
                                           "PYTHONLEGACYWINDOWSSTDIO", NULL};
    for (int i = 0; unknowns[i]; i++)
        if (getenv(unknowns[i]))
            return 0;
    *coerce = 0;
    const char *name = setlocale(LC_CTYPE, "");
    const char *all = getenv("LC_ALL");
    int c_locale = !name || !strcmp(name, "C") || !strcmp(name, "POSIX");
    if (c_locale) {
        /* Python's UTF-8 mode (PEP 540), and without LC_ALL the C.UTF-8 locale (PEP 538) */
        if (!(all && *all)) {
            if (!setlocale(LC_CTYPE, "C.UTF-8"))
                return 0;
            *coerce = 1;
        }
        *out_errors = "surrogateescape";
        return 1;
    }
    const char *codeset = nl_langinfo(CODESET);
    if (!codeset || strcmp(codeset, "UTF-8") != 0)
        return 0;
    /* a UTF-8 locale: surrogateescape for C.UTF-8 and its spellings, strict otherwise */
    *out_errors = (!strcmp(name, "C.UTF-8") || !strcmp(name, "C.utf8") || !strcmp(name, "UTF-8"))
                      ? "surrogateescape"
                      : "strict";
    return 1;
}

/* ---- the request ----------------------------------------------------------- */

static void json_env(struct buf *b, int coerce) {
    buf_str(b, "{");
    int first = 1;
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue; /* Python's os.environ leaves these out (an empty name it keeps) */
        size_t nlen = (size_t)(eq - *e);
        int seen = 0; /* Python keeps the first of two same names */
        for (char **f = environ; f < e && !seen; f++)
            seen = !strncmp(*f, *e, nlen + 1);
        if (seen || (coerce && nlen == 8 && !strncmp(*e, "LC_CTYPE", 8)))
            continue;
        if (!first)
            buf_str(b, ", ");
        first = 0;
        json_bytes(b, *e, nlen);
        buf_str(b, ": ");
        json_cstr(b, eq + 1);
    }
    if (coerce) {
        buf_str(b, first ? "" : ", ");
        buf_str(b, "\"LC_CTYPE\": \"C.UTF-8\"");
    }
    buf_str(b, "}");
}

static void build_request(struct buf *b, int argc, char **argv, const char *key, const char *cwd,
                          const char *errors, int coerce) {
    mode_t mask = umask(022);
    umask(mask);
    char number[32];
    buf_str(b, "{\"v\": 1, \"op\": \"run\", \"key\": ");
    json_cstr(b, key);
    buf_str(b, ", \"version\": ");
    json_cstr(b, STRATA_VERSION);
    buf_str(b, ", \"argv\": [");
    for (int i = 1; i < argc; i++) {
        if (i > 1)
            buf_str(b, ", ");
        json_cstr(b, argv[i]);
    }
    buf_str(b, "], \"cwd\": ");
    json_cstr(b, cwd);
    buf_str(b, ", \"env\": ");
    json_env(b, coerce);
    snprintf(number, sizeof number, "%u", (unsigned)mask);
    buf_str(b, ", \"umask\": ");
    buf_str(b, number);
    buf_str(b, ", \"fsencoding\": [\"utf-8\", \"surrogateescape\"], \"tty\": [");
    buf_str(b, isatty(1) ? "true" : "false");
    buf_str(b, ", ");
    buf_str(b, isatty(2) ? "true" : "false");
    buf_str(b, "], \"encoding\": [[\"utf-8\", \"");
    buf_str(b, errors);
    buf_str(b, "\"], [\"utf-8\", \"backslashreplace\"]]}\n");
}

/* ---- printing ------------------------------------------------------------------ */

static void write_all(int fd, const char *data, size_t len) {
    while (len) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EPIPE) /* as the command line does: the reader went away */
                _exit(1);
            fprintf(stderr, "error: cannot write the command's output: %s\n", strerror(errno));
            _exit(1);
        }
        data += n;
        len -= (size_t)n;
    }
}

static void print_output(const struct buf *chunks) {
    size_t at = 0;
    while (at + 9 <= chunks->len) {
        int fd = (unsigned char)chunks->data[at];
        uint64_t len;
        memcpy(&len, chunks->data + at + 1, 8);
        write_all(fd, chunks->data + at + 9, (size_t)len);
        at += 9 + (size_t)len;
    }
}

/* ---- main ------------------------------------------------------------------------ */

static int env_is(const char *name, const char *value) {
    const char *v = getenv(name);
    return v && !strcmp(v, value);
}

/* `strata hook claude-code|codex [--ask] [--strict]`: a lifecycle hook whose message comes
 * on stdin, which this client can hand to the watcher as `--payload=MESSAGE`. */
static int served_hook(int argc, char **argv) {
    if (argc < 3 || strcmp(argv[1], "hook") ||
        (strcmp(argv[2], "claude-code") && strcmp(argv[2], "codex")))
        return 0;
    for (int i = 3; i < argc; i++)
        if (strcmp(argv[i], "--ask") && strcmp(argv[i], "--strict"))
            return 0;
    return !isatty(0);
}

/* Read the hook's message (all of stdin); 0 when it cannot be handed over (too long, a NUL). */
static int take_stdin(void) {
    size_t cap = 65536;
    g_stdin_data = malloc(cap);
    if (!g_stdin_data)
        return 0;
    g_stdin_taken = 1;
    for (;;) {
        if (g_stdin_len == cap) {
            if (cap >= MAX_REQUEST / 2)
                return 0; /* the rest stays on stdin: strata-py reads the whole of it */
            char *more = realloc(g_stdin_data, cap * 2);
            if (!more)
                return 0;
            g_stdin_data = more;
            cap *= 2;
        }
        ssize_t n = read(0, g_stdin_data + g_stdin_len, cap - g_stdin_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return 0;
        if (n == 0)
            break;
        g_stdin_len += (size_t)n;
    }
    return memchr(g_stdin_data, '\0', g_stdin_len) == NULL;
}

int main(int argc, char **argv) {
    g_argv = argv;
    int hook = served_hook(argc, argv);
    if (argc < 2 || !strcmp(argv[1], "run") || (!strcmp(argv[1], "hook") && !hook) ||
        !strcmp(argv[1], "--version"))
        run_python(); /* their own fast paths live in Python */
    if (env_is("STRATA_NO_NATIVE", "1") || env_is("STRATA_DEBUG", "1") ||
        env_is("STRATA_NO_RESIDENT", "1"))
        run_python();
    if (fcntl(1, F_GETFD) < 0 || fcntl(2, F_GETFD) < 0)
        run_python(); /* a closed stream: Python reports it */
    const char *errors;
    int coerce;
    if (!stream_errors(&errors, &coerce))
        run_python();
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        run_python();
    char *sock_path = find_socket(cwd);
    if (!sock_path)
        run_python();
    char key_path[PATH_BUF];
    path_of(key_path, "%s", sock_path); /* shorter than 100 bytes */
    strcpy(strrchr(key_path, '/') + 1, "watch.key");
    char *key = read_small(key_path);
    if (!key || !all_ascii(key))
        run_python();

    if (hook) { /* the message read here goes to the watcher as an argument */
        if (!take_stdin())
            run_python();
        static char *hook_argv[8];
        char *payload = malloc(g_stdin_len + sizeof "--payload=");
        if (!payload || argc > 6)
            run_python();
        memcpy(payload, "--payload=", 10);
        memcpy(payload + 10, g_stdin_data, g_stdin_len);
        payload[10 + g_stdin_len] = '\0';
        for (int i = 0; i < argc; i++)
            hook_argv[i] = argv[i];
        hook_argv[argc] = payload;
        hook_argv[argc + 1] = NULL;
        argv = hook_argv; /* g_argv stays: strata-py gets the command as it was typed */
        argc += 1;
    }
    struct buf request = {0};
    build_request(&request, argc, argv, key, cwd, errors, coerce);
    if (request.len > MAX_REQUEST)
        run_python();

    int json = wants_json(argc, argv);
    char interrupted[sizeof g_interrupted];
    error_text(interrupted, sizeof interrupted, json, "Interrupted", "interrupted", NULL);
    memcpy(g_interrupted, interrupted, sizeof interrupted); /* no handler is installed yet */
    struct sigaction sa = {0}, caller_int, caller_pipe;
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, NULL, &caller_int);
    if (caller_int.sa_handler != SIG_IGN) /* a caller that ignores Ctrl-C keeps ignoring it */
        sigaction(SIGINT, &sa, NULL);
    struct sigaction ignore = {0};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &caller_pipe);

    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0)
        run_python();
    struct sockaddr_un addr = {0};
    addr.sun_family = AF_UNIX;
    strcpy(addr.sun_path, sock_path);
    set_timeout(sock, READY_TIMEOUT);
    struct buf line = {0}, rest = {0};
    struct reply ready;
    if (connect(sock, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        !send_all(sock, request.data, request.len) || !read_line(sock, &line, &rest) ||
        !parse_reply(line.data, line.len, &ready))
        goto fall_back;
    if (ready.queued) { /* another caller's command runs: wait for the turn */
        set_timeout(sock, QUEUE_TIMEOUT);
        if (!read_line(sock, &line, &rest) || !parse_reply(line.data, line.len, &ready))
            goto fall_back;
        set_timeout(sock, READY_TIMEOUT);
    }
    if (ready.v != 1 || !ready.ready)
        goto fall_back;
    /* From "go" on the watcher may have started: never fall back. */
    char handed[sizeof g_interrupted], message[256];
    snprintf(message, sizeof message,
             "interrupted; the watcher (pid %ld) finishes 'strata %s' (it may have recorded it)",
             ready.pid, argv[1]);
    error_text(handed, sizeof handed, json, "Interrupted", message,
               "see 'strata history' and 'strata status'");
    sigset_t block, saved;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &saved);
    memcpy(g_interrupted, handed, sizeof handed); /* Ctrl-C from here on: the watcher's */
    sigprocmask(SIG_SETMASK, &saved, NULL);
    if (!send_all(sock, "{\"go\": true}\n", 13)) {
        /* not sent whole: the watcher ignores a partial line and runs nothing */
        sigprocmask(SIG_BLOCK, &block, &saved);
        memcpy(g_interrupted, interrupted, sizeof interrupted);
        sigprocmask(SIG_SETMASK, &saved, NULL);
        goto fall_back;
    }
    set_timeout(sock, 0);
    struct reply done;
    if (!read_line(sock, &line, &rest) || !parse_reply(line.data, line.len, &done) ||
        !done.done || !done.has_code) {
        char stopped[512];
        snprintf(message, sizeof message,
                 "the watcher (pid %ld) stopped while running 'strata %s'; it may or may not "
                 "have recorded it",
                 ready.pid, argv[1]);
        error_text(stopped, sizeof stopped, json, "WatcherStopped", message,
                   "see 'strata history' and 'strata check'");
        fputs(stopped, stderr);
        return 1;
    }
    close(sock);
    print_output(&done.chunks);
    return (int)(done.code & 0xFF);

fall_back:
    close(sock);
    sigaction(SIGINT, &caller_int, NULL);
    sigaction(SIGPIPE, &caller_pipe, NULL);
    if (g_timed_out) /* stuck or busy: strata-py runs the command without asking it again */
        setenv(SILENT_WATCHER, "1", 1);
    run_python();
    return 1;
}
