#include "dk_shims.h"

#include <errno.h>
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
