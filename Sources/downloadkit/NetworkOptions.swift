import ArgumentParser
import HTTPClient
import HTTPWire

/// `--proxy`, `--noproxy`, `-4`, `-6` and `--no-pipelining`, shared by `get` and `queue run`.
struct NetworkOptions: ParsableArguments {
    @Option(name: .customLong("proxy"), help: "Proxy for every URL: http://[user:password@]host:port (CONNECT for https), socks5://… (local DNS) or socks5h://… (proxy resolves). \"\" disables the environment's proxies. Default: http_proxy, https_proxy, all_proxy as curl reads them.")
    var proxy: String?

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
        if let proxy, !proxy.isEmpty {
            do {
                _ = try ProxyURL(proxy)
            } catch {
                throw ValidationError("--proxy \(proxy) is not a usable proxy URL: \(error.detail)")
            }
        }
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
        configuration.proxy = proxies
        if ipv4Only { configuration.addressFamily = .ipv4 }
        if ipv6Only { configuration.addressFamily = .ipv6 }
        if noPipelining { configuration.pipelining = false }
    }
}
