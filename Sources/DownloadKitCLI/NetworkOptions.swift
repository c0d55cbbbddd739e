import ArgumentParser
import Foundation
import HTTPClient
import HTTPWire

/// `--proxy`, `--noproxy`, `-4`, `-6` and `--no-pipelining`, shared by `get` and `queue run`.
struct NetworkOptions: ParsableArguments {
    @Option(name: .customLong("proxy"), help: "Proxy for every URL: http://[user:password@]host:port (CONNECT for https), socks5://host:port (local DNS) or socks5h://host:port (proxy resolves). \"\" disables the environment's proxies. Default: http_proxy, https_proxy, all_proxy as curl reads them.")
    var proxy: String?

    @Option(name: .customLong("proxy-user"), help: ArgumentHelp(
        "user:password for the proxy (instead of the proxy URL's userinfo; masked in ps, but prefer --proxy-user-file or $DOWNLOADKIT_PROXY_USER).",
        valueName: "user:password"))
    var proxyUser: String?

    @Option(name: .customLong("proxy-user-file"), help: ArgumentHelp(
        "Like --proxy-user, read from the first line of this file (yours, mode 0600: refused otherwise).", valueName: "path"))
    var proxyUserFile: String?

    /// Environment variable holding the proxy's `user:password` when neither option gives it.
    static let proxyUserEnvironment = "DOWNLOADKIT_PROXY_USER"

    @Option(name: .customLong("noproxy"), help: "Hosts to reach directly, comma-separated: names (suffix match), IPs, CIDR ranges, or * (overrides no_proxy/NO_PROXY).")
    var noProxy: String?

    @Flag(name: .customShort("4"), help: "Connect over IPv4 only.")
    var ipv4Only = false

    @Flag(name: .customShort("6"), help: "Connect over IPv6 only.")
    var ipv6Only = false

    @Flag(name: .customLong("no-pipelining"), help: "Never send a range request before the previous response on its connection has ended. By default --connections sends the next request ahead where the round trip is a noticeable share of a request (HTTP/1.1 pipelining), and stops for a server that mishandles it.")
    var noPipelining = false

    mutating func validate() throws {
        if ipv4Only && ipv6Only { throw ValidationError("-4 and -6 cannot be used together") }
        if proxyUser != nil && proxyUserFile != nil {
            throw ValidationError("--proxy-user and --proxy-user-file cannot be used together")
        }
        if let proxy, !proxy.isEmpty {
            do {
                _ = try ProxyURL(proxy)
            } catch {
                throw ValidationError("--proxy \(HTTPURL.redacting(proxy)) is not a usable proxy URL: \(error.detail)")
            }
        }
    }

    /// The proxy's `user:password` from `--proxy-user`, `--proxy-user-file` or `$DOWNLOADKIT_PROXY_USER`.
    func proxyCredential() throws(SecretFileError) -> String? {
        if let proxyUser { return proxyUser }
        if let proxyUserFile { return try SecretFile.firstLine(proxyUserFile, option: "--proxy-user-file") }
        if let value = ProcessInfo.processInfo.environment[Self.proxyUserEnvironment], !value.isEmpty { return value }
        return nil
    }

    /// Applies the options to `configuration`, reading the environment now so a bad proxy variable
    /// is reported as such.
    func apply(to configuration: inout DKHTTPClientConfiguration) throws(TransportError) {
        var proxies = try ProxyConfiguration(environment: ProxyConfiguration.processEnvironment())
        if let proxy {
            // Validated above; "" means no proxy at all.
            proxies = ProxyConfiguration(all: proxy.isEmpty ? nil : try? ProxyURL(proxy), noProxy: proxies.noProxy)
        }
        if let noProxy { proxies.noProxy = NoProxyList(noProxy) }
        let credential: String?
        do {
            credential = try proxyCredential()
        } catch {
            throw TransportError(.invalidProxy, detail: error.description)
        }
        if let credential {
            // user:password, split at the first colon (as --user); replaces the proxy URL's userinfo.
            let parts = credential.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            for keyPath in [\ProxyConfiguration.httpProxy, \ProxyConfiguration.httpsProxy] where proxies[keyPath: keyPath] != nil {
                proxies[keyPath: keyPath]?.user = String(parts[0])
                proxies[keyPath: keyPath]?.password = parts.count > 1 ? String(parts[1]) : nil
            }
        }
        configuration.proxy = proxies
        if ipv4Only { configuration.addressFamily = .ipv4 }
        if ipv6Only { configuration.addressFamily = .ipv6 }
        if noPipelining { configuration.pipelining = false }
    }
}
