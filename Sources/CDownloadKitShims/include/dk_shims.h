#ifndef DK_SHIMS_H
#define DK_SHIMS_H

#include <openssl/ssl.h>

/// OpenSSL exposes these as macros, which Swift cannot call. Each shim is a real, `dk_`-prefixed function.

/// Wraps `SSL_set_tlsext_host_name` (sets the SNI host name). Returns 1 on success.
int dk_SSL_set_tlsext_host_name(SSL *ssl, const char *name);

/// Wraps `SSL_CTX_set_min_proto_version`. Returns 1 on success.
int dk_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version);

#endif
