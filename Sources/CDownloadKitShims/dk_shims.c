#include "dk_shims.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/socket.h>
#if defined(__aarch64__)
#include <sys/auxv.h>
#include <asm/hwcap.h>
#endif

int dk_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}

int dk_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}

int dk_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_max_proto_version(ctx, version);
}

void dk_SSL_CTX_set_nonblocking_client_modes(SSL_CTX *ctx) {
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_AUTO_RETRY);
    /* Read ahead into a 64 KiB buffer: one read(2) brings several records instead of two reads
       (header, then body) per 16 KiB record. */
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_default_read_buffer_len(ctx, 64 * 1024);
}

void dk_SSL_CTX_disable_renegotiation(SSL_CTX *ctx) {
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
}

int dk_SSL_set1_ip_asc(SSL *ssl, const char *ip) {
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
    if (param == NULL) {
        return 0;
    }
    return X509_VERIFY_PARAM_set1_ip_asc(param, ip);
}

/* A copy of OpenSSL's socket BIO method with only the write function replaced. Built once. */
static BIO_METHOD *dk_nosigpipe_method = NULL;
static pthread_once_t dk_nosigpipe_once = PTHREAD_ONCE_INIT;

static int dk_nosigpipe_write(BIO *bio, const char *data, int length) {
    int fd = -1;
    BIO_get_fd(bio, &fd);
    BIO_clear_retry_flags(bio);
    ssize_t written;
    do {
        written = send(fd, data, (size_t)length, MSG_NOSIGNAL);
    } while (written < 0 && errno == EINTR);
    if (written <= 0 && BIO_sock_should_retry((int)written)) {
        BIO_set_retry_write(bio);
    }
    return (int)written;
}

static void dk_nosigpipe_make_method(void) {
    const BIO_METHOD *socket_method = BIO_s_socket();
    BIO_METHOD *method = BIO_meth_new(BIO_TYPE_SOCKET, "socket (MSG_NOSIGNAL)");
    if (method == NULL) {
        return;
    }
    if (BIO_meth_set_write(method, dk_nosigpipe_write) != 1
        || BIO_meth_set_read(method, BIO_meth_get_read(socket_method)) != 1
        || BIO_meth_set_puts(method, BIO_meth_get_puts(socket_method)) != 1
        || BIO_meth_set_ctrl(method, BIO_meth_get_ctrl(socket_method)) != 1
        || BIO_meth_set_create(method, BIO_meth_get_create(socket_method)) != 1
        || BIO_meth_set_destroy(method, BIO_meth_get_destroy(socket_method)) != 1) {
        BIO_meth_free(method);
        return;
    }
    dk_nosigpipe_method = method;
}

BIO *dk_BIO_new_socket_nosigpipe(int fd) {
    pthread_once(&dk_nosigpipe_once, dk_nosigpipe_make_method);
    if (dk_nosigpipe_method == NULL) {
        return NULL;
    }
    BIO *bio = BIO_new(dk_nosigpipe_method);
    if (bio == NULL) {
        return NULL;
    }
    BIO_set_fd(bio, fd, BIO_NOCLOSE);
    return bio;
}

int dk_ERR_is_unexpected_eof(unsigned long error) {
    return ERR_GET_LIB(error) == ERR_LIB_SSL && ERR_GET_REASON(error) == SSL_R_UNEXPECTED_EOF_WHILE_READING;
}

void dk_SSL_CTX_enable_external_client_session_cache(SSL_CTX *ctx) {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
}

int dk_ERR_get_reason(unsigned long error) {
    return ERR_GET_REASON(error);
}

int dk_cpu_has_aes(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("aes") ? 1 : 0;
#elif defined(__aarch64__)
    return (getauxval(AT_HWCAP) & HWCAP_AES) ? 1 : 0;
#else
    return 0;
#endif
}

/* A lookup method over one PEM bundle that parses it on the first question the store cannot answer
   itself. One method object (built once); each lookup carries its path, a flag and a mutex. */
typedef struct {
    pthread_mutex_t mutex;
    int loaded;
    char *path;
} dk_lazy_bundle;

static X509_LOOKUP_METHOD *dk_lazy_bundle_method = NULL;
static pthread_once_t dk_lazy_bundle_once = PTHREAD_ONCE_INIT;

static void dk_lazy_bundle_free(X509_LOOKUP *lookup) {
    dk_lazy_bundle *bundle = X509_LOOKUP_get_method_data(lookup);
    if (bundle == NULL) {
        return;
    }
    pthread_mutex_destroy(&bundle->mutex);
    free(bundle->path);
    free(bundle);
    X509_LOOKUP_set_method_data(lookup, NULL);
}

static int dk_lazy_bundle_get_by_subject(X509_LOOKUP *lookup, X509_LOOKUP_TYPE type, const X509_NAME *name,
                                         X509_OBJECT *ret) {
    dk_lazy_bundle *bundle = X509_LOOKUP_get_method_data(lookup);
    X509_STORE *store = X509_LOOKUP_get_store(lookup);
    if (bundle == NULL || store == NULL || type != X509_LU_X509) {
        return 0;
    }
    pthread_mutex_lock(&bundle->mutex);
    if (!bundle->loaded) {
        bundle->loaded = 1;
        /* Adds every certificate (and CRL) of the file to the lookup's store. */
        (void)X509_load_cert_crl_file(lookup, bundle->path, X509_FILETYPE_PEM);
        ERR_clear_error();
    }
    pthread_mutex_unlock(&bundle->mutex);
    /* Searched every time, not only after the load: another thread's caller may have searched the store
       while this one was still loading it. */
    X509 *found = NULL;
    if (!X509_STORE_lock(store)) {
        return 0;
    }
    X509_OBJECT *object = X509_OBJECT_retrieve_by_subject(X509_STORE_get0_objects(store), type, name);
    if (object != NULL && (found = X509_OBJECT_get0_X509(object)) != NULL) {
        X509_up_ref(found);
    }
    X509_STORE_unlock(store);
    if (found == NULL) {
        return 0;
    }
    int ok = X509_OBJECT_set1_X509(ret, found);
    X509_free(found);
    if (ok) {
        /* Like OpenSSL's own lookups, `ret` borrows the store's reference: the caller takes its own. */
        X509_free(found);
    }
    return ok;
}

static void dk_lazy_bundle_make_method(void) {
    X509_LOOKUP_METHOD *method = X509_LOOKUP_meth_new("PEM bundle, parsed on first use (DownloadKit)");
    if (method == NULL) {
        return;
    }
    if (X509_LOOKUP_meth_set_free(method, dk_lazy_bundle_free) != 1
        || X509_LOOKUP_meth_set_get_by_subject(method, dk_lazy_bundle_get_by_subject) != 1) {
        X509_LOOKUP_meth_free(method);
        return;
    }
    dk_lazy_bundle_method = method;
}

static int dk_X509_STORE_add_lazy_bundle(X509_STORE *store, const char *path) {
    pthread_once(&dk_lazy_bundle_once, dk_lazy_bundle_make_method);
    if (dk_lazy_bundle_method == NULL) {
        return 0;
    }
    dk_lazy_bundle *bundle = calloc(1, sizeof(*bundle));
    if (bundle == NULL || (bundle->path = strdup(path)) == NULL) {
        free(bundle);
        return 0;
    }
    pthread_mutex_init(&bundle->mutex, NULL);
    X509_LOOKUP *lookup = X509_STORE_add_lookup(store, dk_lazy_bundle_method);
    if (lookup == NULL) {
        pthread_mutex_destroy(&bundle->mutex);
        free(bundle->path);
        free(bundle);
        return 0;
    }
    X509_LOOKUP_set_method_data(lookup, bundle);
    return 1;
}

int dk_SSL_CTX_load_verify_paths_lazily(SSL_CTX *ctx, const char *file, const char *dir) {
    X509_STORE *store = SSL_CTX_get_cert_store(ctx);
    if (store == NULL) {
        return 0;
    }
    /* The directory first: its lookups are cheap and already lazy. A missing directory is no error. */
    if (dir != NULL && X509_STORE_load_path(store, dir) != 1) {
        ERR_clear_error();
    }
    if (file != NULL && access(file, R_OK) == 0 && dk_X509_STORE_add_lazy_bundle(store, file) != 1) {
        return 0;
    }
    return 1;
}

int dk_SSL_CTX_trusted_certificate_count(SSL_CTX *ctx) {
    X509_STORE *store = SSL_CTX_get_cert_store(ctx);
    if (store == NULL || !X509_STORE_lock(store)) {
        return 0;
    }
    STACK_OF(X509_OBJECT) *objects = X509_STORE_get0_objects(store);
    int count = 0;
    for (int i = 0; i < sk_X509_OBJECT_num(objects); i++) {
        if (X509_OBJECT_get_type(sk_X509_OBJECT_value(objects, i)) == X509_LU_X509) {
            count++;
        }
    }
    X509_STORE_unlock(store);
    return count;
}
