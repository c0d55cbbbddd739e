import Foundation
import HTTPClient
import HTTPWire
import Testing
import TestOrigin

@testable import DownloadKit

/// Issue #44, item 9: a download's error texts never carry the URL's password or query values, and a
/// CR/LF in the caller's own header is the caller's error, refused before connecting.
@Suite(.timeLimit(.minutes(1)))
struct SecretErrorTextTests {
    static func failure(_ result: Result<DownloadResult, DownloadError>) -> DownloadError? {
        if case .failure(let error) = result { return error }
        return nil
    }

    static func expectClean(_ error: DownloadError?, _ comment: Comment? = nil) {
        guard let error else {
            Issue.record("the download did not fail")
            return
        }
        let texts = [error.detail, error.description, error.underlying ?? "", "\(error)", String(reflecting: error.cause)]
        for text in texts {
            #expect(!text.contains("PASS") && !text.contains("SECRET"), "\(text)")
        }
    }

    @Test func aStatusErrorNamesTheURLWithoutPasswordOrQueryValues() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let dir = try ScratchDirectory()
        let url = "http://u:PASS@127.0.0.1:\(origin.port)/404?sig=SECRET"
        let (result, _) = await runDownload(DownloadRequest(url: url, destination: .file(dir.file("x"))))
        let error = Self.failure(result)
        #expect(error?.code == .httpStatus)
        #expect(error?.detail.contains("http://u:***@127.0.0.1:\(origin.port)/404?sig=***") == true, "\(error?.detail ?? "")")
        Self.expectClean(error)
    }

    @Test(arguments: [
        "http://u:PASS@127.0.0.1:99999/x?sig=SECRET", "http://u:PASS@127.0.0.1:0/x?sig=SECRET",
        "http://u:PASS@[::zz]/x?sig=SECRET", "ftp://u:PASS@host/x?sig=SECRET",
    ])
    func anInvalidURLIsNamedRedacted(_ url: String) async throws {
        let dir = try ScratchDirectory()
        let (result, _) = await runDownload(DownloadRequest(url: url, destination: .file(dir.file("x"))))
        let error = Self.failure(result)
        #expect(error?.code == .invalidURL)
        #expect(error?.detail.contains("u:***@") == true, "\(error?.detail ?? "")")
        Self.expectClean(error)
    }

    /// An invalid replacement URL (an expiring URL's refresh) is named like any other: redacted.
    @Test func anInvalidReplacementURLIsNamedRedacted() async throws {
        let dir = try ScratchDirectory()
        let request = DownloadRequest(
            url: "http://127.0.0.1:1/x", destination: .file(dir.file("x")),
            replacementURL: "http://u:PASS@127.0.0.1:99999/x?sig=SECRET")
        let (result, _) = await runDownload(request)
        let error = Self.failure(result)
        #expect(error?.code == .invalidURL)
        #expect(error?.detail.contains("replacement URL http://u:***@") == true, "\(error?.detail ?? "")")
        Self.expectClean(error)
    }

    @Test func anHTTPSToHTTPRefusalNamesTheTargetWithoutQueryValues() throws {
        let secure = "https://origin.test/disk.iso"
        var machine = EngineMachine(
            url: try HTTPURL(secure),
            settings: .init(DownloadRequest(url: secure, destination: .file("/d")), DownloadConfiguration(), mirrors: []))
        _ = machine.start()
        for location in ["http://u:PASS@origin.test/disk.iso?sig=SECRET", "gopher://u:PASS@origin.test/?sig=SECRET"] {
            let head = ResponseHead(version: .http1_1, status: 302, reason: "", headers: DKHTTPHeaders([("Location", location)]))
            guard case .abandon(let error) = machine.responseHead(head, wallClock: 0).next else {
                Issue.record("the redirect to \(location) was not refused")
                continue
            }
            #expect(error.code == .insecureRedirect)
            #expect(error.detail.contains("sig=***"), "\(error.detail)")
            Self.expectClean(error)
        }
    }

    @Test(arguments: [("X-Trace", "1\r\nX-Injected: 1"), ("Authorization", "Bearer SECRET\nX: 1"), ("X-A\r\nB", "v"), ("X-Nul", "a\0b")])
    func aControlByteInTheCallersHeaderIsRefusedBeforeConnectingAsTheCallersError(_ name: String, _ value: String) async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/f", .resource(Resource(size: 1000, seed: 1)))
        let dir = try ScratchDirectory()
        var headers = DKHTTPHeaders()
        headers.add(name: name, value: value)
        let (result, _) = await runDownload(
            DownloadRequest(url: origin.url("/f"), destination: .file(dir.file("f")), headers: headers))
        let error = Self.failure(result)
        #expect(error?.code == .invalidRequest, "\(String(describing: error))")
        #expect(error?.detail.contains("caller") == true, "\(error?.detail ?? "")")
        #expect(error?.detail.contains("server sent") == false)
        #expect(error?.detail.contains("\r") == false && error?.detail.contains("\n") == false)
        Self.expectClean(error)
        #expect(origin.requests().isEmpty, "nothing was sent")
        #expect(error?.isTransient == false)
    }
}
