/*
 * strata._walk: the part of a full scan that touches every file, in C.
 *
 * A scan without a change monitor lists every folder and lstat()s every
 * kept entry to learn that nothing changed (see strata/store/scan.py). In
 * Python that costs a stat_result object and a dozen bytecodes per file;
 * here it is a getdents and an fstatat per entry, on as many threads as the
 * caller asks for, with the GIL released.
 *
 * match(items, threads) takes, per folder, (path, order, ignored): the
 * folder's absolute path, the names the stat cache recorded in listing
 * order joined with "/", and the names the cache recorded as ignored. For
 * each folder whose listing is exactly ``order`` and holds only regular
 * files and folders (ignored entries aside) it returns
 *
 *   (keys, subfolders, ignored_kinds)
 *
 * where ``keys`` is marshal.dumps(list_of_keys, 2) of the stat keys the
 * Python scan digests (a folder's permission bits; a file's permission
 * bits, size, mtime_ns, ctime_ns and inode), ``subfolders`` the kept
 * subfolders' names in listing order and ``ignored_kinds`` a (name,
 * is_folder) pair per ignored entry listed. Any other folder (a name more
 * or fewer, a symlink, a special file, an error) gets None: the caller
 * lists it itself. Nothing here decides whether a folder is unchanged; the
 * caller compares the digest of ``keys`` with the cache.
 *
 * prefetch(items, threads) starts the same work on threads of its own and
 * returns at once: a command that is about to scan starts it before loading
 * the modules a scan needs, so the listing runs on the other core meanwhile.
 * The next match() takes a prefetched result for an item with the same path,
 * order and ignored names (helping to finish the prefetch first), and works
 * out the others itself (match([]) only waits for the prefetch to finish);
 * forget() drops what is left. A prefetched result is
 * what the folder held a few milliseconds before the scan asked: as if the
 * walk had reached that folder first.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* more threads than this are never worth it for a listing */
#define MAX_THREADS 16
/* an mtime in nanoseconds past this (about year 2262) does not fit: the caller handles it */
#define MAX_SECONDS 9000000000LL

typedef struct {
    char *data;
    size_t len;
    size_t cap;
    int failed;
} buffer;

typedef struct {
    char *path;
    char *order;
    size_t order_len;
    char **ignored;
    Py_ssize_t n_ignored;
    /* results */
    int ok;
    uint32_t count;
    buffer keys;    /* marshal bytes, version 2 */
    buffer subs;    /* subfolder names, each ended by a NUL */
    buffer kinds;   /* ignored names, each ended by a NUL and then '0' or '1' */
} item;

typedef struct {
    item *items;
    Py_ssize_t n;
    Py_ssize_t next; /* taken with __atomic_fetch_add */
} job;

/* a prefetch: its job, its threads, and a table from path to item (open addressing) */
typedef struct {
    job work;
    pthread_t threads[MAX_THREADS];
    int started;
    Py_ssize_t *slots; /* item index + 1, 0 for an empty slot */
    size_t n_slots;
} prefetched;

/* the one prefetch of this process (the GIL guards this pointer) */
static prefetched *pending = NULL;

static void put(buffer *b, const void *p, size_t n) {
    if (b->failed) {
        return;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) {
            cap *= 2;
        }
        char *grown = realloc(b->data, cap);
        if (grown == NULL) {
            b->failed = 1;
            return;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void put_u32(buffer *b, uint32_t v) {
    unsigned char le[4] = {v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, (v >> 24) & 0xff};
    put(b, le, 4);
}

/* an int as marshal version 2 writes it: TYPE_INT when it fits in 32 bits, else TYPE_LONG
 * with 15-bit digits, least significant first, their count negated for a negative value */
static void put_int(buffer *b, long long v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
        put(b, "i", 1);
        put_u32(b, (uint32_t)(int32_t)v);
        return;
    }
    unsigned long long a = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    unsigned char digits[2 * 5];
    int n = 0;
    while (a) {
        unsigned d = (unsigned)(a & 0x7fff);
        digits[2 * n] = d & 0xff;
        digits[2 * n + 1] = (d >> 8) & 0xff;
        a >>= 15;
        n++;
    }
    put(b, "l", 1);
    put_u32(b, (uint32_t)(int32_t)(v < 0 ? -n : n));
    put(b, digits, (size_t)(2 * n));
}

static int is_ignored(const item *it, const char *name) {
    for (Py_ssize_t i = 0; i < it->n_ignored; i++) {
        if (strcmp(it->ignored[i], name) == 0) {
            return 1;
        }
    }
    return 0;
}

static long long nanoseconds(struct timespec t, int *bad) {
    if (t.tv_sec > MAX_SECONDS || t.tv_sec < -MAX_SECONDS) {
        *bad = 1;
        return 0;
    }
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* 1 when the folder is as described (results filled in), 0 when the caller must list it */
static int compare_folder(item *it) {
    int fd = open(it->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    DIR *dir = fdopendir(fd);
    if (dir == NULL) {
        close(fd);
        return 0;
    }
    const char *at = it->order;
    const char *end = it->order + it->order_len;
    int first = 1;
    int ok = 1;
    put(&it->keys, "[\0\0\0\0", 5); /* the count is written at the end */
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(dir);
        if (e == NULL) {
            ok = errno == 0;
            break;
        }
        const char *name = e->d_name;
        if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) {
            continue;
        }
        size_t len = strlen(name);
        if (!first) {
            if (at >= end || *at != '/') {
                ok = 0;
                break;
            }
            at++;
        }
        first = 0;
        if ((size_t)(end - at) < len || memcmp(at, name, len) != 0 ||
            (at + len < end && at[len] != '/')) {
            ok = 0;
            break;
        }
        at += len;
        struct stat st;
        if (is_ignored(it, name)) {
            int folder;
            if (e->d_type == DT_UNKNOWN) {
                folder = fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
            } else {
                folder = e->d_type == DT_DIR;
            }
            put(&it->kinds, name, len + 1);
            put(&it->kinds, folder ? "1" : "0", 1);
            continue;
        }
        if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            ok = 0;
            break;
        }
        if (S_ISREG(st.st_mode)) {
            int bad = 0;
            long long mtime = nanoseconds(st.st_mtim, &bad);
            long long ctime = nanoseconds(st.st_ctim, &bad);
            if (bad || st.st_ino > (unsigned long long)LLONG_MAX) {
                ok = 0;
                break;
            }
            put(&it->keys, "(", 1);
            put_u32(&it->keys, 5);
            put_int(&it->keys, st.st_mode & 0777);
            put_int(&it->keys, (long long)st.st_size);
            put_int(&it->keys, mtime);
            put_int(&it->keys, ctime);
            put_int(&it->keys, (long long)st.st_ino);
        } else if (S_ISDIR(st.st_mode)) {
            put_int(&it->keys, st.st_mode & 0777);
            put(&it->subs, name, len + 1);
        } else {
            ok = 0; /* a symlink (its target is part of its key) or a special file */
            break;
        }
        it->count++;
    }
    closedir(dir);
    if (!ok || at != end || it->keys.failed || it->subs.failed || it->kinds.failed) {
        return 0;
    }
    uint32_t n = it->count;
    unsigned char le[4] = {n & 0xff, (n >> 8) & 0xff, (n >> 16) & 0xff, (n >> 24) & 0xff};
    memcpy(it->keys.data + 1, le, 4);
    return 1;
}

static void *work(void *arg) {
    job *j = arg;
    for (;;) {
        Py_ssize_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (i >= j->n) {
            return NULL;
        }
        j->items[i].ok = compare_folder(&j->items[i]);
    }
}

static char *fs_copy(PyObject *text, size_t *length) {
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "strata._walk.match: paths and names are str");
        return NULL;
    }
    PyObject *encoded = PyUnicode_EncodeFSDefault(text);
    if (encoded == NULL) {
        return NULL;
    }
    char *data;
    Py_ssize_t size;
    if (PyBytes_AsStringAndSize(encoded, &data, &size) < 0) {
        Py_DECREF(encoded);
        return NULL;
    }
    if (memchr(data, 0, (size_t)size) != NULL) {
        Py_DECREF(encoded);
        PyErr_SetString(PyExc_ValueError, "strata._walk.match: a NUL in a path or name");
        return NULL;
    }
    char *copy = malloc((size_t)size + 1);
    if (copy == NULL) {
        Py_DECREF(encoded);
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(copy, data, (size_t)size + 1);
    Py_DECREF(encoded);
    if (length != NULL) {
        *length = (size_t)size;
    }
    return copy;
}

static void free_items(item *items, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        free(items[i].path);
        free(items[i].order);
        for (Py_ssize_t k = 0; k < items[i].n_ignored; k++) {
            free(items[i].ignored[k]);
        }
        free(items[i].ignored);
        free(items[i].keys.data);
        free(items[i].subs.data);
        free(items[i].kinds.data);
    }
    free(items);
}

static int take_item(item *it, PyObject *spec) {
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 3) {
        PyErr_SetString(PyExc_TypeError, "strata._walk.match: each item is (path, order, ignored)");
        return -1;
    }
    it->path = fs_copy(PyTuple_GET_ITEM(spec, 0), NULL);
    if (it->path == NULL) {
        return -1;
    }
    it->order = fs_copy(PyTuple_GET_ITEM(spec, 1), &it->order_len);
    if (it->order == NULL) {
        return -1;
    }
    PyObject *ignored = PySequence_Fast(PyTuple_GET_ITEM(spec, 2), "ignored names: a sequence");
    if (ignored == NULL) {
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ignored);
    if (n) {
        it->ignored = calloc((size_t)n, sizeof(char *));
        if (it->ignored == NULL) {
            Py_DECREF(ignored);
            PyErr_NoMemory();
            return -1;
        }
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        it->ignored[k] = fs_copy(PySequence_Fast_GET_ITEM(ignored, k), NULL);
        if (it->ignored[k] == NULL) {
            Py_DECREF(ignored);
            return -1;
        }
        it->n_ignored = k + 1;
    }
    Py_DECREF(ignored);
    return 0;
}

/* the names of a buffer of NUL-ended names, as a list of str */
static PyObject *names_of(const buffer *b) {
    PyObject *names = PyList_New(0);
    if (names == NULL) {
        return NULL;
    }
    for (size_t at = 0; at < b->len;) {
        size_t len = strlen(b->data + at);
        PyObject *name = PyUnicode_DecodeFSDefaultAndSize(b->data + at, (Py_ssize_t)len);
        if (name == NULL || PyList_Append(names, name) < 0) {
            Py_XDECREF(name);
            Py_DECREF(names);
            return NULL;
        }
        Py_DECREF(name);
        at += len + 1;
    }
    return names;
}

static PyObject *kinds_of(const buffer *b) {
    PyObject *kinds = PyList_New(0);
    if (kinds == NULL) {
        return NULL;
    }
    for (size_t at = 0; at < b->len;) {
        size_t len = strlen(b->data + at);
        PyObject *pair = Py_BuildValue(
            "(NO)",
            PyUnicode_DecodeFSDefaultAndSize(b->data + at, (Py_ssize_t)len),
            b->data[at + len + 1] == '1' ? Py_True : Py_False);
        if (pair == NULL || PyList_Append(kinds, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(kinds);
            return NULL;
        }
        Py_DECREF(pair);
        at += len + 2;
    }
    return kinds;
}

static PyObject *result_of(const item *it) {
    if (!it->ok) {
        Py_RETURN_NONE;
    }
    PyObject *keys = PyBytes_FromStringAndSize(it->keys.data, (Py_ssize_t)it->keys.len);
    PyObject *subs = keys ? names_of(&it->subs) : NULL;
    PyObject *kinds = subs ? kinds_of(&it->kinds) : NULL;
    if (kinds == NULL) {
        Py_XDECREF(keys);
        Py_XDECREF(subs);
        return NULL;
    }
    return Py_BuildValue("(NNN)", keys, subs, kinds);
}

static uint64_t hash_of(const char *text) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *text; text++) {
        h = (h ^ (unsigned char)*text) * 1099511628211ULL;
    }
    return h;
}

static void run_job(job *j, int threads, pthread_t *helpers, int *started) {
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&helpers[*started], NULL, work, j) == 0) {
            (*started)++;
        }
    }
}

/* finish the pending prefetch (this thread and ``threads`` - 1 more help) */
static void finish_pending(int threads) {
    pthread_t helpers[MAX_THREADS];
    int started = 0;
    run_job(&pending->work, threads, helpers, &started);
    work(&pending->work);
    for (int t = 0; t < started; t++) {
        pthread_join(helpers[t], NULL);
    }
    for (int t = 0; t < pending->started; t++) {
        pthread_join(pending->threads[t], NULL);
    }
    pending->started = 0;
}

static void drop_pending(void) {
    if (pending == NULL) {
        return;
    }
    Py_BEGIN_ALLOW_THREADS
    finish_pending(1);
    Py_END_ALLOW_THREADS
    free_items(pending->work.items, pending->work.n);
    free(pending->slots);
    free(pending);
    pending = NULL;
}

static int same_ignored(const item *a, const item *b) {
    if (a->n_ignored != b->n_ignored) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < a->n_ignored; k++) {
        if (strcmp(a->ignored[k], b->ignored[k]) != 0) {
            return 0;
        }
    }
    return 1;
}

/* the prefetched item for ``want`` (same path, order and ignored names), or NULL */
static item *prefetched_for(const item *want) {
    if (pending == NULL) {
        return NULL;
    }
    size_t mask = pending->n_slots - 1;
    for (size_t at = hash_of(want->path) & mask;; at = (at + 1) & mask) {
        Py_ssize_t index = pending->slots[at];
        if (index == 0) {
            return NULL;
        }
        item *have = &pending->work.items[index - 1];
        if (strcmp(have->path, want->path) == 0) {
            if (have->order_len == want->order_len && strcmp(have->order, want->order) == 0 &&
                same_ignored(have, want)) {
                return have;
            }
            return NULL;
        }
    }
}

static item *take_items(PyObject *specs, Py_ssize_t n) {
    item *items = calloc(n ? (size_t)n : 1, sizeof(item));
    if (items == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (take_item(&items[i], PyList_GET_ITEM(specs, i)) < 0) {
            free_items(items, n);
            return NULL;
        }
    }
    return items;
}

static PyObject *prefetch(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *specs;
    int threads;
    if (!PyArg_ParseTuple(args, "O!i:prefetch", &PyList_Type, &specs, &threads)) {
        return NULL;
    }
    drop_pending();
    Py_ssize_t n = PyList_GET_SIZE(specs);
    item *items = take_items(specs, n);
    if (items == NULL) {
        return NULL;
    }
    prefetched *p = calloc(1, sizeof(prefetched));
    size_t n_slots = 16;
    while (n_slots < 2 * (size_t)n) {
        n_slots *= 2;
    }
    Py_ssize_t *slots = p ? calloc(n_slots, sizeof(Py_ssize_t)) : NULL;
    if (slots == NULL) {
        free(p);
        free_items(items, n);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t at = hash_of(items[i].path) & (n_slots - 1);
        while (slots[at] != 0 && strcmp(items[slots[at] - 1].path, items[i].path) != 0) {
            at = (at + 1) & (n_slots - 1);
        }
        slots[at] = i + 1; /* a path given twice: the last one stands */
    }
    p->work = (job){items, n, 0};
    p->slots = slots;
    p->n_slots = n_slots;
    if (threads > MAX_THREADS) {
        threads = MAX_THREADS;
    }
    for (int t = 0; t < threads && t < n; t++) {
        if (pthread_create(&p->threads[p->started], NULL, work, &p->work) == 0) {
            p->started++;
        }
    }
    pending = p;
    Py_RETURN_NONE;
}

static PyObject *forget(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    drop_pending();
    Py_RETURN_NONE;
}

static PyObject *match(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *specs;
    int threads;
    if (!PyArg_ParseTuple(args, "O!i:match", &PyList_Type, &specs, &threads)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(specs);
    item *items = take_items(specs, n);
    if (items == NULL) {
        return NULL;
    }
    if (threads > MAX_THREADS) {
        threads = MAX_THREADS;
    }
    if (threads < 1) {
        threads = 1;
    }
    prefetched *p = pending;
    Py_BEGIN_ALLOW_THREADS
    if (p != NULL) {
        finish_pending(threads);
    }
    Py_END_ALLOW_THREADS
    /* the items no prefetched result fits are worked out now */
    item **from = calloc(n ? (size_t)n : 1, sizeof(item *));
    item *todo = calloc(n ? (size_t)n : 1, sizeof(item));
    Py_ssize_t *where = calloc(n ? (size_t)n : 1, sizeof(Py_ssize_t));
    if (from == NULL || todo == NULL || where == NULL) {
        free(from);
        free(todo);
        free(where);
        free_items(items, n);
        return PyErr_NoMemory();
    }
    Py_ssize_t n_todo = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        from[i] = prefetched_for(&items[i]);
        if (from[i] == NULL) {
            where[n_todo] = i;
            todo[n_todo++] = items[i];
        }
    }
    job j = {todo, n_todo, 0};
    if (threads > n_todo) {
        threads = n_todo ? (int)n_todo : 1;
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_t helpers[MAX_THREADS];
    int started = 0;
    run_job(&j, threads, helpers, &started);
    work(&j);
    for (int t = 0; t < started; t++) {
        pthread_join(helpers[t], NULL);
    }
    Py_END_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n_todo; k++) {
        items[where[k]] = todo[k]; /* the results, with the buffers they own */
    }
    free(todo);
    free(where);
    PyObject *results = PyList_New(n);
    if (results == NULL) {
        free(from);
        free_items(items, n);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = result_of(from[i] != NULL ? from[i] : &items[i]);
        if (r == NULL) {
            Py_DECREF(results);
            free(from);
            free_items(items, n);
            return NULL;
        }
        PyList_SET_ITEM(results, i, r);
    }
    free(from);
    free_items(items, n);
    return results;
}

static PyMethodDef methods[] = {
    {"match", match, METH_VARARGS,
     "match(items, threads) -> list: per (path, order, ignored), (keys, subfolders, "
     "ignored_kinds) or None (see the module's source)"},
    {"prefetch", prefetch, METH_VARARGS,
     "prefetch(items, threads) -> None: start match's work on threads of its own; the next "
     "match takes what fits"},
    {"forget", forget, METH_NOARGS, "forget() -> None: drop what a prefetch left"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "strata._walk",
    .m_doc = "A full scan's listing and lstat calls, in C.",
    .m_size = -1,
    .m_methods = methods,
};

/* a forked child has none of the prefetch's threads: it must never join them */
static void forget_in_child(void) { pending = NULL; /* (its memory is left as it is) */ }

PyMODINIT_FUNC PyInit__walk(void) {
    if (pthread_atfork(NULL, NULL, forget_in_child) != 0) {
        PyErr_SetString(PyExc_OSError, "strata._walk: pthread_atfork failed");
        return NULL;
    }
    return PyModule_Create(&module);
}
