/*
 * The Arrow buffers of produced record batches' rows (Kafka record batch v2), filled from
 * the batches' bytes without a Python object per record (bridge/kafka_api/record_rows.py
 * wraps them in arrays).
 *
 * The same walk checks a batch on arrival (check()): the batch comes from the network, so
 * every read is bounds checked and anything that does not parse raises ValueError naming
 * the record and the field (and the batch, for a seal's several). Records are read as
 * aiokafka reads them (its varints, any negative length a null, the record's length
 * checked, no bytes left over), so what it accepts is accepted here; aiokafka's own reader
 * is not used on them because it reads varints and headers past the end of its buffer.
 *
 * A build makes two passes over the records with the interpreter lock released: the first
 * checks them and adds up the sizes, the buffers are then allocated (by the caller's
 * allocator, with the lock held), the second fills them. A check is the first pass alone,
 * with the lock let go only for a batch long enough to be worth it (RELEASE_AT).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#define BATCH_HEADER 61 /* the v2 batch header; records (or their compressed form) follow */
#define ATTRIBUTES_AT 21
#define FIRST_TIMESTAMP_AT 27
#define MAX_TIMESTAMP_AT 35
#define RECORD_COUNT_AT 57
#define LOG_APPEND_TIME 0x08 /* the attributes' timestamp type bit */
#define NO_TIMESTAMP (-1)
#define UNNAMED (-1) /* a Reader's batch when only one is read (check()) */
/* check() lets the interpreter lock go for batches of at least this many records (50-100 us
 * of walking, at 12-26 ns a record). For a batch of a few dozen, handing the lock to a
 * waiting thread and taking it back cost the listener 4-5 us of kernel time, ten times the
 * walk (bench/listener_probe.py: 35 us more per request of eight batches). */
#define RELEASE_AT 4096
#define MAX_OFFSET INT32_MAX /* Arrow's binary and list offsets are 32-bit */
#define MESSAGE 256
#define DETAIL 160

typedef struct {
    Py_buffer data;   /* the whole batch (its header is read from it) */
    Py_buffer region; /* its records: a view of data, or their decompressed form */
    int has_region;
    int64_t count;
    int64_t base_offset;
    int64_t first_timestamp;
    int64_t max_timestamp;
    int log_append_type;
    int64_t log_append_ms;
    int64_t now_ms;
} Batch;

typedef struct {
    int64_t records, headers;
    int64_t key_bytes, key_nulls, value_bytes, value_nulls;
    int64_t header_key_bytes, header_value_bytes, header_value_nulls, headerless;
    int64_t newest; /* the latest timestamp the records carry, as aiokafka gives it */
} Sizes;

typedef struct {
    uint8_t *offsets, *timestamps;
    uint8_t *key_valid, *key_offsets, *key_data;
    uint8_t *value_valid, *value_offsets, *value_data;
    uint8_t *list_valid, *list_offsets;
    uint8_t *hkey_offsets, *hkey_data;
    uint8_t *hvalue_valid, *hvalue_offsets, *hvalue_data;
} Out;

typedef struct {
    const uint8_t *buf;
    Py_ssize_t len, pos;
    Py_ssize_t batch, record;
    char *message;
} Reader;

/* Sets the message of what does not parse, with where it is; returns -1. */
static int fail(Reader *r, const char *format, ...) {
    char detail[DETAIL];
    va_list args;
    va_start(args, format);
    vsnprintf(detail, sizeof detail, format, args);
    va_end(args);
    if (r->batch == UNNAMED) {
        snprintf(r->message, MESSAGE, "record %zd (byte %zd of the records): %s", r->record,
                 r->pos, detail);
    } else {
        snprintf(r->message, MESSAGE, "batch %zd, record %zd (byte %zd of its records): %s",
                 r->batch, r->record, r->pos, detail);
    }
    return -1;
}

/* aiokafka's varint: at most 10 bytes, zigzag decoded; bits past 64 are dropped. */
static int varint(Reader *r, int64_t *out, const char *field) {
    uint64_t value = 0;
    int shift = 0;
    Py_ssize_t pos = r->pos;
    for (;;) {
        if (pos >= r->len) return fail(r, "the %s runs past the end of the records", field);
        uint8_t byte = r->buf[pos++];
        if (byte & 0x80) {
            value |= (uint64_t)(byte & 0x7f) << shift;
            shift += 7;
            if (shift > 63) return fail(r, "the %s is a varint of more than 10 bytes", field);
        } else {
            value |= (uint64_t)byte << shift;
            break;
        }
    }
    *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
    r->pos = pos;
    return 0;
}

/* Skips `length` bytes (a field's contents); fails when fewer are left. */
static int take(Reader *r, int64_t length, const char *field, const uint8_t **at) {
    if (length > (int64_t)(r->len - r->pos)) {
        return fail(r, "the %s claims %lld bytes; %lld are left", field, (long long)length,
                    (long long)(r->len - r->pos));
    }
    *at = r->buf + r->pos;
    r->pos += (Py_ssize_t)length;
    return 0;
}

/* Python's strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF):
 * a header key aiokafka decoded is one this accepts. */
static int valid_utf8(const uint8_t *s, int64_t n) {
    int64_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int more;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            more = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            return 0;
        }
        if (more > n - i - 1) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k <= more; k++) {
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        }
        i += more + 1;
    }
    return 1;
}

static inline void set_bit(uint8_t *bits, int64_t i) { bits[i >> 3] |= (uint8_t)(1u << (i & 7)); }

static inline void put_i32(uint8_t *at, int64_t i, int64_t v) {
    int32_t x = (int32_t)v;
    memcpy(at + 4 * i, &x, 4);
}

static inline void put_i64(uint8_t *at, int64_t i, int64_t v) { memcpy(at + 8 * i, &v, 8); }

static int too_big(Reader *r, int64_t total, const char *what) {
    if (total <= MAX_OFFSET) return 0;
    return fail(r, "the build holds more than 2 GiB of %s (Arrow's offsets are 32-bit)", what);
}

/* One pass over every record of every batch: checks and counts when `out` is NULL, fills
 * the buffers when not. `named`: messages name the batch (a build's several). */
static int walk(Batch *batches, Py_ssize_t n, int named, Sizes *s, const Out *out,
                char *message) {
    int64_t row = 0, header = 0;
    int64_t keys = 0, values = 0, hkeys = 0, hvalues = 0;
    for (Py_ssize_t b = 0; b < n; b++) {
        Batch *batch = &batches[b];
        Reader r = {batch->region.buf, batch->region.len, 0, named ? b : UNNAMED, 0, message};
        for (int64_t i = 0; i < batch->count; i++, row++) {
            int64_t length, attributes, delta, offset_delta, key_len, value_len, count;
            const uint8_t *key = NULL, *value = NULL;
            r.record = (Py_ssize_t)i;
            if (varint(&r, &length, "record length") < 0) return -1;
            Py_ssize_t start = r.pos;
            if (varint(&r, &attributes, "record attributes") < 0) return -1;
            if (varint(&r, &delta, "timestamp delta") < 0) return -1;
            if (varint(&r, &offset_delta, "offset delta") < 0) return -1;
            if (varint(&r, &key_len, "key length") < 0) return -1;
            if (key_len >= 0 && take(&r, key_len, "key", &key) < 0) return -1;
            if (varint(&r, &value_len, "value length") < 0) return -1;
            if (value_len >= 0 && take(&r, value_len, "value", &value) < 0) return -1;
            if (varint(&r, &count, "header count") < 0) return -1;
            /* A header takes at least two bytes (its key's and value's lengths). */
            if (count < 0 || count > (int64_t)(r.len - r.pos) / 2) {
                return fail(&r, "%lld headers, with %lld bytes left", (long long)count,
                            (long long)(r.len - r.pos));
            }
            if (out) {
                int64_t stamp;
                if (batch->log_append_ms >= 0) {
                    stamp = batch->log_append_ms;
                } else {
                    stamp = batch->log_append_type
                                ? batch->max_timestamp
                                /* wraps as aiokafka's int64 sum does */
                                : (int64_t)((uint64_t)batch->first_timestamp + (uint64_t)delta);
                    if (stamp == NO_TIMESTAMP) stamp = batch->now_ms;
                }
                put_i64(out->offsets, row, batch->base_offset + i);
                put_i64(out->timestamps, row, stamp);
                if (key_len >= 0) {
                    if (out->key_valid) set_bit(out->key_valid, row);
                    if (key_len) memcpy(out->key_data + keys, key, (size_t)key_len);
                    keys += key_len;
                }
                put_i32(out->key_offsets, row + 1, keys);
                if (value_len >= 0) {
                    if (out->value_valid) set_bit(out->value_valid, row);
                    if (value_len) memcpy(out->value_data + values, value, (size_t)value_len);
                    values += value_len;
                }
                put_i32(out->value_offsets, row + 1, values);
                if (count && out->list_valid) set_bit(out->list_valid, row);
            } else {
                /* aiokafka's record.timestamp, which the arrival keeps the newest of */
                int64_t stamp = batch->log_append_type
                                    ? batch->max_timestamp
                                    : (int64_t)((uint64_t)batch->first_timestamp + (uint64_t)delta);
                if (stamp > s->newest) s->newest = stamp;
                if (key_len >= 0) s->key_bytes += key_len; else s->key_nulls++;
                if (value_len >= 0) s->value_bytes += value_len; else s->value_nulls++;
                if (!count) s->headerless++;
            }
            for (int64_t h = 0; h < count; h++, header++) {
                int64_t hkey_len, hvalue_len;
                const uint8_t *hkey = NULL, *hvalue = NULL;
                if (varint(&r, &hkey_len, "header key length") < 0) return -1;
                if (hkey_len < 0) {
                    return fail(&r, "header %lld has a key of length %lld", (long long)h,
                                (long long)hkey_len);
                }
                if (take(&r, hkey_len, "header key", &hkey) < 0) return -1;
                if (varint(&r, &hvalue_len, "header value length") < 0) return -1;
                if (hvalue_len >= 0 && take(&r, hvalue_len, "header value", &hvalue) < 0) {
                    return -1;
                }
                if (out) {
                    if (hkey_len) memcpy(out->hkey_data + hkeys, hkey, (size_t)hkey_len);
                    hkeys += hkey_len;
                    put_i32(out->hkey_offsets, header + 1, hkeys);
                    if (hvalue_len >= 0) {
                        if (out->hvalue_valid) set_bit(out->hvalue_valid, header);
                        if (hvalue_len) {
                            memcpy(out->hvalue_data + hvalues, hvalue, (size_t)hvalue_len);
                        }
                        hvalues += hvalue_len;
                    }
                    put_i32(out->hvalue_offsets, header + 1, hvalues);
                } else {
                    if (!valid_utf8(hkey, hkey_len)) {
                        return fail(&r, "header %lld's key is not UTF-8", (long long)h);
                    }
                    s->header_key_bytes += hkey_len;
                    if (hvalue_len >= 0) s->header_value_bytes += hvalue_len;
                    else s->header_value_nulls++;
                }
            }
            if (out) put_i32(out->list_offsets, row + 1, header);
            if ((int64_t)(r.pos - start) != length) {
                return fail(&r, "the record claims %lld bytes and holds %lld", (long long)length,
                            (long long)(r.pos - start));
            }
            if (!out && (too_big(&r, s->key_bytes, "keys") || too_big(&r, s->value_bytes, "values")
                         || too_big(&r, header, "headers")
                         || too_big(&r, s->header_key_bytes, "header keys")
                         || too_big(&r, s->header_value_bytes, "header values"))) {
                return -1;
            }
        }
        if (r.pos != r.len) {
            r.record = (Py_ssize_t)batch->count;
            return fail(&r, "%lld bytes are left after the batch's %lld records",
                        (long long)(r.len - r.pos), (long long)batch->count);
        }
    }
    if (!out) {
        s->records = row;
        s->headers = header;
    }
    return 0;
}

static int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}

static int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

/* One item of build()'s list: (batch bytes, records region or None, base offset,
 * LogAppendTime ms or -1, now ms). */
static int open_batch(PyObject *item, Py_ssize_t index, Batch *batch) {
    PyObject *data, *region;
    long long base_offset, log_append_ms, now_ms;
    if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "OOLLL", &data, &region, &base_offset,
                                                   &log_append_ms, &now_ms)) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "batch %zd: expected (data, region or None, base_offset, log_append_ms, now_ms)",
                         index);
        }
        return -1;
    }
    if (PyObject_GetBuffer(data, &batch->data, PyBUF_SIMPLE) < 0) return -1;
    const uint8_t *head = batch->data.buf;
    if (batch->data.len < BATCH_HEADER) {
        PyErr_Format(PyExc_ValueError, "batch %zd: %zd bytes, shorter than a batch header",
                     index, batch->data.len);
        PyBuffer_Release(&batch->data);
        return -1;
    }
    batch->count = be32(head + RECORD_COUNT_AT);
    if (batch->count < 0) {
        PyErr_Format(PyExc_ValueError, "batch %zd: a record count of %lld", index,
                     (long long)batch->count);
        PyBuffer_Release(&batch->data);
        return -1;
    }
    batch->first_timestamp = be64(head + FIRST_TIMESTAMP_AT);
    batch->max_timestamp = be64(head + MAX_TIMESTAMP_AT);
    batch->log_append_type = (head[ATTRIBUTES_AT + 1] & LOG_APPEND_TIME) != 0;
    batch->base_offset = base_offset;
    batch->log_append_ms = log_append_ms;
    batch->now_ms = now_ms;
    if (region == Py_None) {
        batch->has_region = 0;
        batch->region = batch->data;
        batch->region.buf = (uint8_t *)batch->data.buf + BATCH_HEADER;
        batch->region.len = batch->data.len - BATCH_HEADER;
        return 0;
    }
    if (PyObject_GetBuffer(region, &batch->region, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&batch->data);
        return -1;
    }
    batch->has_region = 1;
    return 0;
}

static void close_batches(Batch *batches, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (batches[i].has_region) PyBuffer_Release(&batches[i].region);
        PyBuffer_Release(&batches[i].data);
    }
}

/* A buffer of `size` bytes from the caller's allocator (pyarrow's memory pool), zeroed
 * when it is a validity bitmap; None (and *at NULL) when `wanted` is false. */
static PyObject *allocate(PyObject *allocator, int64_t size, int wanted, int zeroed,
                          uint8_t **at, Py_buffer *views, int *opened) {
    *at = NULL;
    if (!wanted) Py_RETURN_NONE;
    PyObject *found = PyObject_CallFunction(allocator, "L", (long long)size);
    if (!found) return NULL;
    Py_buffer *view = &views[*opened];
    if (PyObject_GetBuffer(found, view, PyBUF_WRITABLE) < 0) {
        Py_DECREF(found);
        return NULL;
    }
    (*opened)++;
    if (view->len < size) {
        Py_DECREF(found);
        PyErr_SetString(PyExc_ValueError, "the allocator returned a buffer that is too small");
        return NULL;
    }
    *at = view->buf;
    if (zeroed && size) memset(*at, 0, (size_t)size);
    return found;
}

#define BUFFERS 15

static PyObject *build(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *items, *allocator;
    if (!PyArg_ParseTuple(args, "OO:build", &items, &allocator)) return NULL;
    PyObject *seq = PySequence_Fast(items, "build() takes a sequence of batches");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Batch *batches = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Batch));
    if (!batches) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    Py_ssize_t opened_batches = 0;
    PyObject *result = NULL;
    PyObject *buffers[BUFFERS] = {NULL};
    Py_buffer views[BUFFERS];
    int opened = 0;
    for (; opened_batches < n; opened_batches++) {
        if (open_batch(PySequence_Fast_GET_ITEM(seq, opened_batches), opened_batches,
                       &batches[opened_batches]) < 0) {
            goto done;
        }
    }
    Sizes s = {0};
    char message[MESSAGE] = "";
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = walk(batches, n, 1, &s, NULL, message);
    Py_END_ALLOW_THREADS
    if (status < 0) {
        PyErr_SetString(PyExc_ValueError, message);
        goto done;
    }
    Out out;
    int64_t rows = s.records, headers = s.headers;
    int64_t row_bits = (rows + 7) / 8, header_bits = (headers + 7) / 8;
    struct {
        int64_t size;
        int wanted, zeroed;
        uint8_t **at;
    } plan[BUFFERS] = {
        {8 * rows, 1, 0, &out.offsets},
        {8 * rows, 1, 0, &out.timestamps},
        {row_bits, s.key_nulls > 0, 1, &out.key_valid},
        {4 * (rows + 1), 1, 0, &out.key_offsets},
        {s.key_bytes, 1, 0, &out.key_data},
        {row_bits, s.value_nulls > 0, 1, &out.value_valid},
        {4 * (rows + 1), 1, 0, &out.value_offsets},
        {s.value_bytes, 1, 0, &out.value_data},
        {row_bits, s.headerless > 0, 1, &out.list_valid},
        {4 * (rows + 1), 1, 0, &out.list_offsets},
        {4 * (headers + 1), 1, 0, &out.hkey_offsets},
        {s.header_key_bytes, 1, 0, &out.hkey_data},
        {header_bits, s.header_value_nulls > 0, 1, &out.hvalue_valid},
        {4 * (headers + 1), 1, 0, &out.hvalue_offsets},
        {s.header_value_bytes, 1, 0, &out.hvalue_data},
    };
    for (int i = 0; i < BUFFERS; i++) {
        buffers[i] = allocate(allocator, plan[i].size, plan[i].wanted, plan[i].zeroed,
                              plan[i].at, views, &opened);
        if (!buffers[i]) goto done;
    }
    /* The first offset of every offsets buffer; the walk writes the others. */
    put_i32(out.key_offsets, 0, 0);
    put_i32(out.value_offsets, 0, 0);
    put_i32(out.list_offsets, 0, 0);
    put_i32(out.hkey_offsets, 0, 0);
    put_i32(out.hvalue_offsets, 0, 0);
    Py_BEGIN_ALLOW_THREADS
    status = walk(batches, n, 1, &s, &out, message);
    Py_END_ALLOW_THREADS
    if (status < 0) { /* the first walk checked the same bytes: not reached */
        PyErr_SetString(PyExc_ValueError, message);
        goto done;
    }
    for (int i = 0; i < opened; i++) PyBuffer_Release(&views[i]);
    opened = 0;
    static const char *names[BUFFERS] = {
        "offsets",     "timestamps", "key_valid",      "key_offsets",    "key_data",
        "value_valid", "value_offsets", "value_data",  "list_valid",     "list_offsets",
        "hkey_offsets", "hkey_data",  "hvalue_valid",  "hvalue_offsets", "hvalue_data",
    };
    result = Py_BuildValue("{sLsLsLsLsLsL}", "rows", (long long)rows, "headers",
                           (long long)headers, "key_nulls", (long long)s.key_nulls,
                           "value_nulls", (long long)s.value_nulls, "headerless",
                           (long long)s.headerless, "header_value_nulls",
                           (long long)s.header_value_nulls);
    for (int i = 0; result && i < BUFFERS; i++) {
        if (PyDict_SetItemString(result, names[i], buffers[i]) < 0) Py_CLEAR(result);
    }
done:
    for (int i = 0; i < opened; i++) PyBuffer_Release(&views[i]);
    for (int i = 0; i < BUFFERS; i++) Py_XDECREF(buffers[i]);
    close_batches(batches, opened_batches);
    PyMem_Free(batches);
    Py_DECREF(seq);
    return result;
}

/* check(batch bytes, decompressed records or None) -> (records, newest timestamp): every
 * record of one batch read and checked as a build reads it, nothing built. The record
 * count is the header's; a negative one reads no records, as aiokafka reads none (the
 * caller compares the count with the header's last offset delta). */
static PyObject *check(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *data, *region;
    if (!PyArg_ParseTuple(args, "OO:check", &data, &region)) return NULL;
    Batch batch = {0};
    if (PyObject_GetBuffer(data, &batch.data, PyBUF_SIMPLE) < 0) return NULL;
    if (batch.data.len < BATCH_HEADER) {
        PyErr_Format(PyExc_ValueError, "%zd bytes, shorter than a batch header", batch.data.len);
        PyBuffer_Release(&batch.data);
        return NULL;
    }
    const uint8_t *head = batch.data.buf;
    batch.count = be32(head + RECORD_COUNT_AT);
    if (batch.count < 0) batch.count = 0;
    batch.first_timestamp = be64(head + FIRST_TIMESTAMP_AT);
    batch.max_timestamp = be64(head + MAX_TIMESTAMP_AT);
    batch.log_append_type = (head[ATTRIBUTES_AT + 1] & LOG_APPEND_TIME) != 0;
    batch.log_append_ms = NO_TIMESTAMP;
    batch.now_ms = NO_TIMESTAMP;
    if (region == Py_None) {
        batch.region = batch.data;
        batch.region.buf = (uint8_t *)batch.data.buf + BATCH_HEADER;
        batch.region.len = batch.data.len - BATCH_HEADER;
    } else {
        if (PyObject_GetBuffer(region, &batch.region, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&batch.data);
            return NULL;
        }
        batch.has_region = 1;
    }
    Sizes s = {0};
    s.newest = INT64_MIN;
    char message[MESSAGE] = "";
    PyThreadState *released = batch.count >= RELEASE_AT ? PyEval_SaveThread() : NULL;
    int status = walk(&batch, 1, 0, &s, NULL, message);
    if (released) PyEval_RestoreThread(released);
    close_batches(&batch, 1);
    if (status < 0) {
        PyErr_SetString(PyExc_ValueError, message);
        return NULL;
    }
    return Py_BuildValue("LL", (long long)s.records,
                         (long long)(s.records ? s.newest : NO_TIMESTAMP));
}

static PyMethodDef methods[] = {
    {"check", check, METH_VARARGS,
     "check(batch, records) -> (count, newest): one batch's records read and checked.\n\n"
     "records: the batch's decompressed records, or None to read them from the batch.\n"
     "newest: the latest record timestamp (-1 when there are no records). Raises ValueError\n"
     "naming the record and field of anything that does not parse."},
    {"build", build, METH_VARARGS,
     "build(batches, allocate) -> dict: the Arrow buffers of the batches' rows.\n\n"
     "batches: (batch bytes, decompressed records or None, base offset, LogAppendTime ms\n"
     "or -1, now ms) each; allocate(size) returns a writable buffer\n"
     "(pyarrow.allocate_buffer). Raises ValueError naming the batch, record and field of anything that does not parse."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_record_rows",
    .m_doc = "Arrow buffers of Kafka record batches' rows, built in compiled code.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__record_rows(void) { return PyModule_Create(&module_def); }
