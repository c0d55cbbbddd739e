#ifndef DK_SHIMS_H
#define DK_SHIMS_H

#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/bio.h>
#include <openssl/x509v3.h>

/// OpenSSL exposes these as macros, which Swift cannot call. Each shim is a real, `dk_`-prefixed function.

/// Wraps `SSL_set_tlsext_host_name` (sets the SNI host name). Returns 1 on success.
int dk_SSL_set_tlsext_host_name(SSL *ssl, const char *name);

/// Wraps `SSL_CTX_set_min_proto_version`. Returns 1 on success.
int dk_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version);

/// Wraps `SSL_CTX_set_max_proto_version` (0 means "highest supported"). Returns 1 on success.
int dk_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int version);

/// Sets the `SSL_CTX` modes a non-blocking client needs: `SSL_MODE_ENABLE_PARTIAL_WRITE` (a write
/// reports progress record by record), `SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER` (a retried write may
/// pass a different pointer) and `SSL_MODE_AUTO_RETRY` (non-application records such as TLS 1.3
/// session tickets are consumed inside `SSL_read`, which then reports WANT_READ on a non-blocking
/// socket instead of returning early). Wraps `SSL_CTX_set_mode`.
void dk_SSL_CTX_set_nonblocking_client_modes(SSL_CTX *ctx);

/// 1 when the CPU has AES instructions (x86 AES-NI, ARMv8 AES), else 0: decides the TLS 1.3 cipher order.
int dk_cpu_has_aes(void);

/// Refuses TLS 1.2 renegotiation (`SSL_OP_NO_RENEGOTIATION`, whose value is a macro expression).
void dk_SSL_CTX_disable_renegotiation(SSL_CTX *ctx);

/// Sets the IP address (textual, IPv4 or IPv6) the peer certificate must name in its
/// subjectAltName. Wraps `X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), ip)`. Returns 1 on success.
int dk_SSL_set1_ip_asc(SSL *ssl, const char *ip);

/// Creates a socket BIO over `fd` (not closed by the BIO) whose writes use `send(..., MSG_NOSIGNAL)`,
/// so writing to a connection the peer reset returns EPIPE instead of raising SIGPIPE (OpenSSL's own
/// socket BIO uses write(2)). Reads and controls are OpenSSL's socket BIO's. Returns NULL on failure.
BIO *dk_BIO_new_socket_nosigpipe(int fd);

/// Returns 1 when `error` (from `ERR_get_error`) is OpenSSL 3's "unexpected eof while reading":
/// the peer closed TCP without sending close_notify.
int dk_ERR_is_unexpected_eof(unsigned long error);

/// Turns on client-side session caching for `ctx` (`SSL_CTX_set_session_cache_mode` with
/// `SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE`): OpenSSL hands every new session to the
/// callback set with `SSL_CTX_sess_set_new_cb` and keeps none itself; the caller decides where each goes.
void dk_SSL_CTX_enable_external_client_session_cache(SSL_CTX *ctx);

/// Trusts the certificates of a hashed directory and of a PEM bundle file (either may be NULL), as
/// `SSL_CTX_set_default_verify_paths` does for OpenSSL's default paths, but reads the bundle only when a
/// verification first asks the store for an issuer it does not already hold: the directory is searched
/// first (one file per issuer, lazily, as OpenSSL always does), then the bundle is parsed once, whole. A
/// handshake whose issuers are all in the store already (a server certificate issued by a `--cacert` CA)
/// never parses the bundle: 139 certificates cost 22-42 ms with OpenSSL 3. Returns 1 when the lookups
/// were added.
int dk_SSL_CTX_load_verify_paths_lazily(SSL_CTX *ctx, const char *file, const char *dir);

/// How many certificates the context's trust store holds now (tests: whether a bundle was parsed).
int dk_SSL_CTX_trusted_certificate_count(SSL_CTX *ctx);

/// Returns the library-independent reason code of a packed OpenSSL error (`ERR_GET_REASON`).
int dk_ERR_get_reason(unsigned long error);

#endif
