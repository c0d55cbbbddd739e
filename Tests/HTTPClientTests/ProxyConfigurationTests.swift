import HTTPWire
import Testing
import TestThreads

@testable import HTTPClient

/// Proxy variables read as curl reads them, and the per-URL choice.
@Suite(.offPool) struct ProxyConfigurationTests {
    let httpURL = try! HTTPURL("http://files.example.com/a")
    let httpsURL = try! HTTPURL("https://files.example.com/a")

    @Test func lowercaseHTTPProxyOnlyForHTTPAndBothCasesForHTTPS() throws {
        let upperOnly = try ProxyConfiguration(environment: ["HTTP_PROXY": "http://evil:1", "HTTPS_PROXY": "http://p:2"])
        #expect(upperOnly.proxy(for: httpURL) == nil, "HTTP_PROXY (upper case) is ignored: httpoxy")
        #expect(upperOnly.proxy(for: httpsURL)?.port == 2)
        let lower = try ProxyConfiguration(environment: [
            "http_proxy": "http://a:1", "https_proxy": "socks5h://b:2", "HTTPS_PROXY": "http://c:3",
        ])
        #expect(lower.proxy(for: httpURL)?.host == "a")
        #expect(lower.proxy(for: httpsURL)?.host == "b" && lower.proxy(for: httpsURL)?.kind == .socks5h)
    }

    @Test func allProxyIsTheFallbackAndEmptyValuesAreUnset() throws {
        let all = try ProxyConfiguration(environment: ["ALL_PROXY": "socks5://s:1080", "https_proxy": ""])
        #expect(all.proxy(for: httpURL)?.kind == .socks5)
        #expect(all.proxy(for: httpsURL)?.host == "s")
        let lowerWins = try ProxyConfiguration(environment: ["all_proxy": "http://l:1", "ALL_PROXY": "http://u:1"])
        #expect(lowerWins.proxy(for: httpURL)?.host == "l")
        #expect(try ProxyConfiguration(environment: [:]).proxy(for: httpsURL) == nil)
    }

    @Test func noProxyBypassesMatchingHostsLowercasePreferred() throws {
        let config = try ProxyConfiguration(environment: [
            "all_proxy": "http://p:1", "no_proxy": "example.com", "NO_PROXY": "other.org",
        ])
        #expect(config.proxy(for: httpURL) == nil)
        #expect(config.proxy(for: try HTTPURL("http://other.org/")) != nil)
        let star = try ProxyConfiguration(environment: ["all_proxy": "http://p:1", "NO_PROXY": "*"])
        #expect(star.proxy(for: httpsURL) == nil)
    }

    @Test func aBadVariableIsNamedInATypedError() {
        do {
            _ = try ProxyConfiguration(environment: ["https_proxy": "ftp://p:1"])
            Issue.record("accepted")
        } catch {
            #expect(error.code == .invalidProxy)
            #expect(error.detail.contains("https_proxy"))
        }
    }

    @Test func explicitConfigurationAndDirect() throws {
        let proxy = try ProxyURL("socks5://127.0.0.1:9")
        let config = ProxyConfiguration(all: proxy, noProxy: NoProxyList("localhost"))
        #expect(config.proxy(for: httpsURL) == proxy)
        #expect(config.proxy(for: try HTTPURL("http://localhost/")) == nil)
        #expect(ProxyConfiguration.direct.proxy(for: httpURL) == nil)
        #expect(DKHTTPClientConfiguration().proxy == .environment)
        // A client created with explicit proxies uses them, not the environment.
        var configuration = DKHTTPClientConfiguration()
        configuration.proxy = config
        #expect(try DKHTTPClient(configuration: configuration).proxies == config)
    }
}
