/*
 * The native reader's consumer: librdkafka messages into Arrow columns, with no Python object
 * per record (issue 48).
 *
 * One type, RangeConsumer, with the four calls the range reader's loop makes
 * (kafka_batch_provider/spark/kafka_reader.py, which owns the loop: positions, stalls, errors):
 * assign, consume, position, close. consume() takes up to n messages from librdkafka's consumer
 * queue (rd_kafka_consume_batch_queue, as confluent-kafka's Consumer.consume), copies the
 * records below `end` into Arrow buffers, and hands them over as one struct array through the
 * Arrow C data interface (a PyCapsule "arrow_array"); the GIL is released while it waits and
 * while it copies. Message errors come back as (code, reason) pairs, to be judged in Python as
 * the python reader judges confluent-kafka's.
 *
 * The struct's children, in this order: key binary, value binary, offset int64, timestamp int64
 * (microseconds; null where Kafka gives none), timestampType int32, headers
 * list<struct<key string, value binary>> (null where the record has no headers). The caller
 * imports it with the matching Arrow schema (kafka_batch_native.COLUMNS).
 *
 * librdkafka is the one the confluent-kafka wheel carries (linked by setup.py), so both readers
 * run the same client with the same settings.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- The Arrow C data interface (https://arrow.apache.org/docs/format/CDataInterface.html) ---- */

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};
#endif

/* What one array node owns: its buffers and its children (freed by release_array). */
typedef struct {
    const void *buffers[3];
    struct ArrowArray *children[6];
} Owned;

static void release_array(struct ArrowArray *array) {
    Owned *owned = (Owned *)array->private_data;
    for (int64_t i = 0; i < array->n_children; i++) {
        struct ArrowArray *child = owned->children[i];
        if (child->release != NULL)
            child->release(child);
        free(child);
    }
    for (int64_t i = 0; i < array->n_buffers; i++)
        free((void *)owned->buffers[i]);
    free(owned);
    array->release = NULL;
}

/* A node taking ownership of its buffers (malloc'd or NULL) and children; NULL when out of memory. */
static struct ArrowArray *new_array(int64_t length, int64_t null_count, int n_buffers, void *b0, void *b1,
                                    void *b2, int n_children, struct ArrowArray **children) {
    struct ArrowArray *array = calloc(1, sizeof *array);
    Owned *owned = calloc(1, sizeof *owned);
    if (array == NULL || owned == NULL) {
        free(array);
        free(owned);
        return NULL;
    }
    owned->buffers[0] = b0;
    owned->buffers[1] = b1;
    owned->buffers[2] = b2;
    for (int i = 0; i < n_children; i++)
        owned->children[i] = children[i];
    array->length = length;
    array->null_count = null_count;
    array->n_buffers = n_buffers;
    array->n_children = n_children;
    array->buffers = owned->buffers;
    array->children = owned->children;
    array->release = release_array;
    array->private_data = owned;
    return array;
}

/* ---- Growing buffers ---- */

typedef struct {
    uint8_t *data;
    size_t length, capacity;
    int failed; /* out of memory, or a column past Arrow's 2 GiB of 32-bit offsets */
} Buffer;

static int reserve(Buffer *b, size_t more) {
    if (b->failed)
        return -1;
    if (b->length + more <= b->capacity)
        return 0;
    size_t capacity = b->capacity ? b->capacity : 4096;
    while (capacity < b->length + more)
        capacity *= 2;
    uint8_t *data = realloc(b->data, capacity);
    if (data == NULL) {
        b->failed = 1;
        return -1;
    }
    b->data = data;
    b->capacity = capacity;
    return 0;
}

static void append(Buffer *b, const void *bytes, size_t n) {
    if (n == 0 || reserve(b, n) != 0)
        return;
    memcpy(b->data + b->length, bytes, n);
    b->length += n;
}

static void append_i32(Buffer *b, int32_t v) { append(b, &v, sizeof v); }
static void append_i64(Buffer *b, int64_t v) { append(b, &v, sizeof v); }

/* Validity bitmaps are sized once per batch (the count of messages is known). */
static uint8_t *new_bitmap(size_t bits) {
    uint8_t *bitmap = calloc((bits + 7) / 8 + 1, 1);
    return bitmap;
}

static void set_valid(uint8_t *bitmap, size_t i) { bitmap[i / 8] |= (uint8_t)(1u << (i % 8)); }

/* A variable-length column (binary or string): validity, 32-bit offsets, bytes. */
typedef struct {
    uint8_t *validity;
    Buffer offsets, data;
    int64_t nulls;
} VarColumn;

static void var_start(VarColumn *c, size_t capacity_rows) {
    memset(c, 0, sizeof *c);
    c->validity = capacity_rows ? new_bitmap(capacity_rows) : NULL;
    append_i32(&c->offsets, 0);
}

static void var_append(VarColumn *c, size_t row, const void *bytes, size_t n) {
    if (bytes == NULL) {
        c->nulls++;
    } else {
        if (c->validity != NULL)
            set_valid(c->validity, row);
        append(&c->data, bytes, n);
    }
    if (c->data.length > INT32_MAX)
        c->data.failed = 1;
    append_i32(&c->offsets, (int32_t)c->data.length);
}

static int var_failed(const VarColumn *c) { return c->offsets.failed || c->data.failed; }

/* The node of a variable-length column (its buffers move into it). */
static struct ArrowArray *var_array(VarColumn *c, int64_t length) {
    uint8_t *validity = c->validity;
    if (c->nulls == 0) {
        free(validity);
        validity = NULL;
    }
    /* An empty data buffer must still be a valid pointer for some importers. */
    if (c->data.data == NULL && reserve(&c->data, 1) != 0) {
        free(validity);
        free(c->offsets.data);
        c->validity = NULL;
        c->offsets.data = NULL;
        return NULL;
    }
    struct ArrowArray *array = new_array(length, c->nulls, 3, validity, c->offsets.data, c->data.data, 0, NULL);
    if (array == NULL) {
        free(validity);
        free(c->offsets.data);
        free(c->data.data);
    }
    c->validity = NULL;
    c->offsets.data = c->data.data = NULL;
    return array;
}

static void var_free(VarColumn *c) {
    free(c->validity);
    free(c->offsets.data);
    free(c->data.data);
}

/* ---- The batch being built ---- */

typedef struct {
    VarColumn key, value;
    Buffer offsets, timestamps, timestamp_types;
    uint8_t *timestamp_validity;
    int64_t timestamp_nulls;
    /* headers: list validity, list offsets; the struct's key (string) and value (binary) columns */
    uint8_t *headers_validity;
    int64_t headers_nulls;
    Buffer header_offsets;
    VarColumn header_key, header_value;
    size_t header_count, header_bits; /* headers so far; bits of the header value bitmap */
    size_t rows;
    int failed;
    int64_t bad_timestamp_offset; /* a record whose timestamp does not fit microseconds (-1: none) */
    int64_t bad_timestamp;
} Batch;

static void batch_start(Batch *b, size_t capacity_rows) {
    memset(b, 0, sizeof *b);
    b->bad_timestamp_offset = -1;
    var_start(&b->key, capacity_rows);
    var_start(&b->value, capacity_rows);
    b->timestamp_validity = new_bitmap(capacity_rows);
    b->headers_validity = new_bitmap(capacity_rows);
    append_i32(&b->header_offsets, 0);
    var_start(&b->header_key, 0);
    b->header_bits = 1024;
    var_start(&b->header_value, b->header_bits);
    reserve(&b->offsets, capacity_rows * 8);
    reserve(&b->timestamps, capacity_rows * 8);
    reserve(&b->timestamp_types, capacity_rows * 4);
    if (b->timestamp_validity == NULL || b->headers_validity == NULL || b->key.validity == NULL ||
        b->value.validity == NULL || b->header_value.validity == NULL)
        b->failed = 1;
}

/* The header value column's bitmap grows with the headers (their count is not known up front). */
static void grow_header_bitmap(Batch *b) {
    if (b->header_count < b->header_bits)
        return;
    size_t bits = b->header_bits * 2, old_bytes = (b->header_bits + 7) / 8 + 1, new_bytes = (bits + 7) / 8 + 1;
    uint8_t *bitmap = realloc(b->header_value.validity, new_bytes);
    if (bitmap == NULL) {
        b->failed = 1;
        return;
    }
    memset(bitmap + old_bytes, 0, new_bytes - old_bytes);
    b->header_value.validity = bitmap;
    b->header_bits = bits;
}

static void batch_add(Batch *b, rd_kafka_message_t *m) {
    size_t row = b->rows++;
    var_append(&b->key, row, m->key, m->key_len);
    var_append(&b->value, row, m->payload, m->len);
    append_i64(&b->offsets, m->offset);
    rd_kafka_timestamp_type_t kind;
    int64_t ts = rd_kafka_message_timestamp(m, &kind);
    if (ts > INT64_MAX / 1000) {
        /* confluent-kafka's column refuses it (OverflowError): fail the read, never wrap */
        if (b->bad_timestamp_offset < 0) {
            b->bad_timestamp_offset = m->offset;
            b->bad_timestamp = ts;
        }
        ts = -1;
    }
    if (ts >= 0) {
        set_valid(b->timestamp_validity, row);
        append_i64(&b->timestamps, ts * 1000); /* Kafka's milliseconds, Spark's microseconds */
    } else {
        b->timestamp_nulls++;
        append_i64(&b->timestamps, 0);
    }
    append_i32(&b->timestamp_types, (int32_t)kind);
    rd_kafka_headers_t *headers = NULL;
    if (rd_kafka_message_headers(m, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR && headers != NULL) {
        set_valid(b->headers_validity, row);
        const char *name;
        const void *value;
        size_t size;
        for (size_t i = 0; rd_kafka_header_get_all(headers, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
             i++) {
            grow_header_bitmap(b);
            if (b->failed)
                break;
            var_append(&b->header_key, b->header_count, name, strlen(name));
            var_append(&b->header_value, b->header_count, value, size);
            b->header_count++;
        }
    } else {
        b->headers_nulls++;
    }
    if (b->header_count > INT32_MAX)
        b->failed = 1;
    append_i32(&b->header_offsets, (int32_t)b->header_count);
}

static int batch_failed(const Batch *b) {
    return b->failed || var_failed(&b->key) || var_failed(&b->value) || b->offsets.failed || b->timestamps.failed ||
           b->timestamp_types.failed || b->header_offsets.failed || var_failed(&b->header_key) ||
           var_failed(&b->header_value);
}

static void batch_free(Batch *b) {
    var_free(&b->key);
    var_free(&b->value);
    free(b->offsets.data);
    free(b->timestamps.data);
    free(b->timestamp_types.data);
    free(b->timestamp_validity);
    free(b->headers_validity);
    free(b->header_offsets.data);
    var_free(&b->header_key);
    var_free(&b->header_value);
}

/* The struct array of the batch (its buffers move into it); NULL when out of memory. */
static struct ArrowArray *batch_array(Batch *b) {
    int64_t n = (int64_t)b->rows, headers = (int64_t)b->header_count;
    struct ArrowArray *children[6] = {0};
    struct ArrowArray *header_fields[2] = {0};
    header_fields[0] = var_array(&b->header_key, headers);
    header_fields[1] = var_array(&b->header_value, headers);
    struct ArrowArray *header_struct = NULL;
    if (header_fields[0] && header_fields[1])
        header_struct = new_array(headers, 0, 1, NULL, NULL, NULL, 2, header_fields);
    if (header_struct == NULL) {
        for (int i = 0; i < 2; i++)
            if (header_fields[i]) {
                header_fields[i]->release(header_fields[i]);
                free(header_fields[i]);
            }
    }
    children[0] = var_array(&b->key, n);
    children[1] = var_array(&b->value, n);
    children[2] = new_array(n, 0, 2, NULL, b->offsets.data, NULL, 0, NULL);
    if (children[2])
        b->offsets.data = NULL;
    uint8_t *ts_validity = b->timestamp_nulls ? b->timestamp_validity : NULL;
    children[3] = new_array(n, b->timestamp_nulls, 2, ts_validity, b->timestamps.data, NULL, 0, NULL);
    if (children[3]) {
        b->timestamps.data = NULL;
        if (ts_validity)
            b->timestamp_validity = NULL;
    }
    children[4] = new_array(n, 0, 2, NULL, b->timestamp_types.data, NULL, 0, NULL);
    if (children[4])
        b->timestamp_types.data = NULL;
    if (header_struct) {
        uint8_t *validity = b->headers_nulls ? b->headers_validity : NULL;
        children[5] = new_array(n, b->headers_nulls, 2, validity, b->header_offsets.data, NULL, 1, &header_struct);
        if (children[5]) {
            b->header_offsets.data = NULL;
            if (validity)
                b->headers_validity = NULL;
        } else {
            header_struct->release(header_struct);
            free(header_struct);
        }
    }
    int complete = 1;
    for (int i = 0; i < 6; i++)
        complete = complete && children[i] != NULL;
    struct ArrowArray *batch = complete ? new_array(n, 0, 1, NULL, NULL, NULL, 6, children) : NULL;
    if (batch == NULL) {
        for (int i = 0; i < 6; i++)
            if (children[i]) {
                children[i]->release(children[i]);
                free(children[i]);
            }
    }
    return batch;
}

/* ---- Capsules (the Arrow PyCapsule interface: released when Python drops an unimported one) ---- */

static void capsule_release(PyObject *capsule) {
    struct ArrowArray *array = PyCapsule_GetPointer(capsule, "arrow_array");
    if (array == NULL) {
        PyErr_Clear();
        return;
    }
    if (array->release != NULL)
        array->release(array);
    free(array);
}

/* ---- RangeConsumer ---- */

typedef struct {
    PyObject_HEAD rd_kafka_t *rk;
    rd_kafka_queue_t *queue;
    int busy; /* a call is inside librdkafka with the GIL released: close() must wait for it */
} RangeConsumer;

static int consumer_init(RangeConsumer *self, PyObject *args, PyObject *kwargs) {
    PyObject *config;
    static char *names[] = {"config", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!", names, &PyDict_Type, &config))
        return -1;
    if (self->rk != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the consumer is already initialized");
        return -1;
    }
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char error[512];
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(config, &pos, &key, &value)) {
        const char *k = PyUnicode_AsUTF8(key), *v = k ? PyUnicode_AsUTF8(value) : NULL;
        if (k == NULL || v == NULL) {
            rd_kafka_conf_destroy(conf);
            PyErr_SetString(PyExc_TypeError, "the native reader's settings must be strings");
            return -1;
        }
        if (rd_kafka_conf_set(conf, k, v, error, sizeof error) != RD_KAFKA_CONF_OK) {
            rd_kafka_conf_destroy(conf);
            /* librdkafka's line names the setting, never its value (a secret may be one). */
            PyErr_Format(PyExc_ValueError, "%s", error);
            return -1;
        }
    }
    self->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, error, sizeof error);
    if (self->rk == NULL) {
        rd_kafka_conf_destroy(conf);
        PyErr_Format(PyExc_ValueError, "%s", error);
        return -1;
    }
    /* As confluent-kafka's Consumer: the main queue forwarded to the consumer's, read in batches. */
    rd_kafka_poll_set_consumer(self->rk);
    self->queue = rd_kafka_queue_get_consumer(self->rk);
    return 0;
}

static int check_open(RangeConsumer *self) {
    if (self->rk == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the consumer is closed");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the consumer is in use by another thread");
        return -1;
    }
    return 0;
}

static PyObject *consumer_assign(RangeConsumer *self, PyObject *args) {
    const char *topic;
    int partition;
    long long offset;
    if (!PyArg_ParseTuple(args, "siL", &topic, &partition, &offset) || check_open(self) < 0)
        return NULL;
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, topic, partition)->offset = offset;
    rd_kafka_resp_err_t err;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS err = rd_kafka_assign(self->rk, list);
    Py_END_ALLOW_THREADS self->busy = 0;
    rd_kafka_topic_partition_list_destroy(list);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        PyErr_Format(PyExc_RuntimeError, "assign failed: %s", rd_kafka_err2str(err));
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *consumer_position(RangeConsumer *self, PyObject *args) {
    const char *topic;
    int partition;
    if (!PyArg_ParseTuple(args, "si", &topic, &partition) || check_open(self) < 0)
        return NULL;
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, topic, partition);
    rd_kafka_resp_err_t err = rd_kafka_position(self->rk, list);
    long long offset = list->elems[0].offset;
    rd_kafka_topic_partition_list_destroy(list);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        PyErr_Format(PyExc_RuntimeError, "position failed: %s", rd_kafka_err2str(err));
        return NULL;
    }
    return PyLong_FromLongLong(offset);
}

typedef struct {
    int code;
    char *reason;
} MessageError;

/*
 * Up to n messages within timeout_ms, as confluent-kafka's Consumer.consume waits for them: in
 * slices of at most 200 ms, returning after the first slice that delivered any (a range's tail,
 * fewer messages than asked, does not wait out the whole timeout).
 */
static ssize_t consume_in_slices(rd_kafka_queue_t *queue, int timeout_ms, rd_kafka_message_t **messages, size_t n) {
    static const int slice_ms = 200;
    int remaining = timeout_ms;
    ssize_t got = 0;
    do {
        int wait = remaining < slice_ms ? remaining : slice_ms;
        ssize_t more = rd_kafka_consume_batch_queue(queue, wait, messages + got, n - (size_t)got);
        if (more < 0)
            return got > 0 ? got : more;
        got += more;
        remaining -= wait;
    } while (got == 0 && remaining > 0);
    return got;
}

/*
 * consume(n, timeout_ms, end) -> (capsule or None, rows, last offset or -1, [(code, reason), ...])
 *
 * Up to n messages; those at or past `end` are dropped (a fetch may run past the planned range).
 */
static PyObject *consumer_consume(RangeConsumer *self, PyObject *args) {
    Py_ssize_t n;
    int timeout_ms;
    long long end;
    if (!PyArg_ParseTuple(args, "niL", &n, &timeout_ms, &end) || check_open(self) < 0)
        return NULL;
    if (n <= 0) {
        PyErr_SetString(PyExc_ValueError, "consume needs n > 0");
        return NULL;
    }
    rd_kafka_message_t **messages = malloc((size_t)n * sizeof *messages);
    MessageError *errors = calloc((size_t)n, sizeof *errors);
    if (messages == NULL || errors == NULL) {
        free(messages);
        free(errors);
        return PyErr_NoMemory();
    }
    ssize_t got;
    size_t n_errors = 0;
    long long last_offset = -1;
    Batch batch;
    struct ArrowArray *array = NULL;
    int out_of_memory = 0;
    int64_t bad_timestamp_offset = -1, bad_timestamp = 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS got = consume_in_slices(self->queue, timeout_ms, messages, (size_t)n);
    if (got > 0) {
        batch_start(&batch, (size_t)got);
        /* The keys' and values' bytes are known up front: one allocation each, no regrowth. */
        size_t key_bytes = 0, value_bytes = 0;
        for (ssize_t i = 0; i < got; i++) {
            key_bytes += messages[i]->key_len;
            value_bytes += messages[i]->len;
        }
        reserve(&batch.key.data, key_bytes);
        reserve(&batch.value.data, value_bytes);
        reserve(&batch.key.offsets, (size_t)got * 4);
        reserve(&batch.value.offsets, (size_t)got * 4);
        for (ssize_t i = 0; i < got; i++) {
            rd_kafka_message_t *m = messages[i];
            if (batch.failed) {
                /* out of memory: the batch is dropped; only the messages are freed */
            } else if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
                errors[n_errors].code = m->err;
                errors[n_errors].reason = strdup(rd_kafka_message_errstr(m));
                n_errors++;
            } else if (m->offset < end) {
                batch_add(&batch, m);
                last_offset = m->offset;
            }
            rd_kafka_message_destroy(m);
        }
        bad_timestamp_offset = batch.bad_timestamp_offset;
        bad_timestamp = batch.bad_timestamp;
        if (bad_timestamp_offset >= 0)
            ; /* refused below */
        else if (batch_failed(&batch))
            out_of_memory = 1;
        else if (batch.rows > 0 && (array = batch_array(&batch)) == NULL)
            out_of_memory = 1;
        batch_free(&batch);
    }
    Py_END_ALLOW_THREADS self->busy = 0;
    free(messages);
    PyObject *error_list = PyList_New(0);
    for (size_t i = 0; error_list != NULL && i < n_errors; i++) {
        PyObject *pair = Py_BuildValue("(is)", errors[i].code, errors[i].reason ? errors[i].reason : "");
        if (pair == NULL || PyList_Append(error_list, pair) < 0)
            Py_CLEAR(error_list);
        Py_XDECREF(pair);
    }
    for (size_t i = 0; i < n_errors; i++)
        free(errors[i].reason);
    free(errors);
    if (got < 0) {
        Py_XDECREF(error_list);
        PyErr_Format(PyExc_RuntimeError, "consume failed: %s", rd_kafka_err2str(rd_kafka_last_error()));
        return NULL;
    }
    if (bad_timestamp_offset >= 0) {
        Py_XDECREF(error_list);
        PyErr_Format(PyExc_OverflowError, "offset %lld: timestamp %lld ms does not fit microseconds in 64 bits",
                     (long long)bad_timestamp_offset, (long long)bad_timestamp);
        return NULL;
    }
    if (out_of_memory || error_list == NULL) {
        if (array != NULL) {
            array->release(array);
            free(array);
        }
        Py_XDECREF(error_list);
        if (out_of_memory)
            PyErr_SetString(PyExc_MemoryError,
                            "the native reader's batch did not fit (out of memory, or over 2 GiB in one column)");
        return NULL;
    }
    PyObject *capsule = Py_None, *rows = NULL;
    Py_INCREF(Py_None);
    int64_t count = 0;
    if (array != NULL) {
        count = array->length;
        Py_DECREF(Py_None);
        capsule = PyCapsule_New(array, "arrow_array", capsule_release);
        if (capsule == NULL) {
            array->release(array);
            free(array);
            Py_DECREF(error_list);
            return NULL;
        }
    }
    rows = PyLong_FromLongLong(count);
    if (rows == NULL) {
        Py_DECREF(capsule);
        Py_DECREF(error_list);
        return NULL;
    }
    /* "N" steals the references, also when it fails */
    return Py_BuildValue("(NNLN)", capsule, rows, last_offset, error_list);
}

static void consumer_shut(RangeConsumer *self) {
    if (self->rk == NULL)
        return;
    rd_kafka_t *rk = self->rk;
    rd_kafka_queue_t *queue = self->queue;
    self->rk = NULL;
    self->queue = NULL;
    Py_BEGIN_ALLOW_THREADS rd_kafka_consumer_close(rk);
    rd_kafka_queue_destroy(queue);
    rd_kafka_destroy(rk);
    Py_END_ALLOW_THREADS
}

static PyObject *consumer_close(RangeConsumer *self, PyObject *Py_UNUSED(ignored)) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the consumer is in use by another thread: close it after its call");
        return NULL;
    }
    consumer_shut(self);
    Py_RETURN_NONE;
}

static void consumer_dealloc(RangeConsumer *self) {
    consumer_shut(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef consumer_methods[] = {
    {"assign", (PyCFunction)consumer_assign, METH_VARARGS, "assign(topic, partition, offset): read from offset"},
    {"consume", (PyCFunction)consumer_consume, METH_VARARGS,
     "consume(n, timeout_ms, end) -> (arrow_array capsule or None, rows, last offset, [(code, reason)])"},
    {"position", (PyCFunction)consumer_position, METH_VARARGS, "position(topic, partition) -> next offset"},
    {"close", (PyCFunction)consumer_close, METH_NOARGS, "leave and free the consumer"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RangeConsumerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kafka_batch_native._reader.RangeConsumer",
    .tp_doc = "A librdkafka consumer of one assigned partition, its messages read as Arrow columns.",
    .tp_basicsize = sizeof(RangeConsumer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)consumer_init,
    .tp_dealloc = (destructor)consumer_dealloc,
    .tp_methods = consumer_methods,
};

static PyObject *librdkafka_version(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
    return PyUnicode_FromString(rd_kafka_version_str());
}

static PyMethodDef module_methods[] = {
    {"librdkafka_version", librdkafka_version, METH_NOARGS, "the version of the librdkafka loaded"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_reader", "librdkafka messages into Arrow columns (the native reader).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__reader(void) {
    if (PyType_Ready(&RangeConsumerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RangeConsumerType);
    if (PyModule_AddObject(m, "RangeConsumer", (PyObject *)&RangeConsumerType) < 0) {
        Py_DECREF(&RangeConsumerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
