import DownloadKit
import Foundation
import HTTPClient
import HTTPWire
import Testing
import TestOrigin

/// Issue #47 items 3 and 6: errors that say what happened — a proxy that closed the connection is
/// named, a proxy offering only schemes not answered (Negotiate, NTLM) is not said to have "refused
/// the credentials" (a Digest-only one is answered: SquidDigestProxyTests), a segment's 401
/// carries its reason phrase, and a line break in a caller's header is the caller's error.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct ErrorWordingTests {
    /// Through a plain-HTTP proxy that reads the request and closes: the error names the proxy.
    @Test func aConnectionTheProxyClosedSaysThroughProxy() async throws {
        let proxy = try ScriptedProxy(.closeAfterHead)
        defer { proxy.stop() }
        let dir = try ScratchDirectory()
        let proxyURL = "http://127.0.0.1:\(proxy.port)"
        let run = try await ProxyTests.runCLI(
            ["get", "http://127.0.0.1:9/f.bin", "-o", dir.file("f.bin"), "--progress", "none", "--retries", "0", "--proxy", proxyURL],
            in: dir)
        #expect(run.exitCode != 0, "\(run.output)")
        #expect(run.output.contains("through proxy \(proxyURL)"), "\(run.output)")
    }

    /// A proxy whose 407 offers only schemes DownloadKit does not answer to proxies, for absolute-form GET
    /// and for CONNECT: the typed error names them, not "it refused the credentials".
    @Test(arguments: ["http", "https"])
    func aProxyOfferingOnlyUnsupportedSchemesIsNamed(scheme: String) async throws {
        let proxy = try ScriptedProxy(.challenge407("Negotiate, NTLM realm=\"windows only\""))
        defer { proxy.stop() }
        let dir = try ScratchDirectory()
        let run = try await ProxyTests.runCLI(
            [
                "get", "\(scheme)://127.0.0.1:9/f.bin", "-o", dir.file("f.bin"), "--progress", "none", "--retries", "0",
                "--proxy", "http://alice:secret@127.0.0.1:\(proxy.port)",
            ], in: dir)
        #expect(run.exitCode != 0, "\(run.output)")
        #expect(run.output.contains("asks for Negotiate or NTLM authentication (realm \"windows only\")"), "\(run.output)")
        #expect(run.output.contains("does not support for proxies"), "\(run.output)")
        #expect(!run.output.contains("refused the credentials"), "\(run.output)")
        #expect(!run.output.contains("secret"), "\(run.output)")
    }

    /// The probe succeeds, then every segment's range request gets `401 Unauthorized`: the error that
    /// ends the download carries the reason phrase.
    @Test func aSegmentsUnauthorizedCarriesItsReasonPhrase() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let total = 8 << 20
        origin.serve(
            "/r.bin",
            .script { request, connection in
                connection.keepsAlive = true
                if request.headers.first(name: "Range") == "bytes=0-0" {
                    try connection.write(
                        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-0/\(total)\r\nETag: \"v1\"\r\n"
                            + "Accept-Ranges: bytes\r\nContent-Length: 1\r\n\r\nA")
                } else {
                    try connection.write("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
                }
            })
        let dir = try ScratchDirectory()
        let run = try await CLITests().run(
            ["get", origin.url("/r.bin"), "-o", dir.file("r.bin"), "--progress", "none", "--connections", "4", "--retries", "0"],
            in: dir)
        #expect(run.exitCode != 0, "\(run.output)")
        #expect(run.output.contains("HTTP status 401 Unauthorized"), "\(run.output)")
    }

    /// A CR or LF in a header the caller gives is the caller's error, named, before any connection.
    @Test(arguments: ["a\rb", "a\nb", "a\r\nX-Injected: 1"])
    func aLineBreakInACallersHeaderIsTheCallersError(value: String) async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/h", .response(status: 200, headers: [], body: Array("ok".utf8)))
        let dir = try ScratchDirectory()
        var headers = DKHTTPHeaders()
        headers.add(name: "X-Test", value: value)
        let download = Download(DownloadRequest(url: origin.url("/h"), destination: .file(dir.file("h")), headers: headers))
        download.start()
        do {
            _ = try await download.result()
            Issue.record("a header with a line break was sent")
        } catch {
            #expect(error.code == .invalidRequest, "\(error)")
            #expect(error.detail.contains("request header \"X-Test\" contains a line break"), "\(error)")
            #expect(!error.detail.contains("server sent"), "\(error)")
        }
        #expect(origin.requests().isEmpty)

        // The client alone: the same typed error, marked as the caller's input.
        let client = try DKHTTPClient()
        #expect {
            _ = try client.execute(
                DKHTTPRequest(url: try HTTPURL(origin.url("/h")), headers: headers), onHead: { _ in .discard },
                onBody: { _ in })
        } throws: { error in
            guard let wire = error as? WireError else { return false }
            return wire.isCallerInput && wire.detail.contains("request header \"X-Test\" contains a line break")
        }
    }
}
