import Foundation
import HTTPClient
import HTTPWire
import Testing

@_spi(DownloadKitInternal) @testable import DownloadKit
@testable import DownloadKitDecisions

/// The download machine as DownloadKit drives it (`EngineMachine`, answering with `DownloadError`): what
/// needs DownloadKit's own types — the settings made from a request and a configuration, the record read
/// from `ResumeInfo`, and the helpers the action and failure tables use. The machine's own rules, every
/// resume rule as a table of events and answers among them, are DecisionsTests' `DownloadStateMachineTests`,
/// written against the decisions module alone.
@Suite("DownloadStateMachine in DownloadKit")
struct DownloadStateMachineTests {
    static let url = "http://origin.test/files/disk.iso"
    static let strong = "\"v1\""
    static let date = "Mon, 01 Jan 2024 00:00:00 GMT"

    static func record(
        bytes: Int64, etag: String? = strong, lastModified: String? = date, total: Int64? = 5000,
        segments: [ResumeSegment] = []
    ) -> ResumeInfo {
        ResumeInfo(
            originalURL: url, tempFilePath: "/downloads/disk.iso.dkpart", bytesReceived: bytes, entityTag: etag,
            lastModified: lastModified, totalLength: total, segments: segments)
    }

    static func fields206(_ first: Int64, _ last: Int64, _ total: Int64, etag: String? = strong) -> [(String, String)] {
        var fields = [("Content-Range", "bytes \(first)-\(last)/\(total)"), ("Content-Length", "\(last - first + 1)")]
        if let etag { fields.append(("ETag", etag)) }
        fields.append(("Last-Modified", date))
        return fields
    }

    /// The machine reads a resume record as the module's `MachineRecord`, made from `ResumeInfo` in one
    /// place: every field it reads is carried, and a recorded original URL that is no URL is none.
    @Test func theMachineReadsTheRecordAsOneModuleValue() throws {
        var info = Self.record(bytes: 1000, segments: [ResumeSegment(start: 0, end: 5000, written: 1000)])
        info.fileName = "disk.iso"
        info.acceptsRanges = true
        let expected = MachineRecord(
            originalURL: try HTTPURL(Self.url), entityTag: Self.strong, lastModified: Self.date, totalLength: 5000,
            acceptsRanges: true, fileName: "disk.iso", bytesReceived: 1000,
            segments: [ResumeSegment(start: 0, end: 5000, written: 1000)])
        #expect(MachineRecord(info) == expected)
        info.originalURL = "not a URL"
        #expect(MachineRecord(info).originalURL == nil)
    }

    /// A directory download named by its rule takes the name the settings were made with (the MD5 of the
    /// URL is computed there, at the edge, not by the machine); a response that names no file falls back to it.
    @Test func aRuleNamedFileTakesTheSettingsName() throws {
        let md5 = DownloadRequest(url: Self.url, destination: .directory("/d", naming: .md5OfURL))
        var settings = EngineMachine.Settings(md5, DownloadConfiguration(), mirrors: [])
        #expect(settings.ruleFileName == EngineMachine.md5Hex(Self.url) + ".iso")
        let byID = DownloadRequest(url: Self.url, destination: .directory("/d", naming: .fileID("lesson-7")))
        #expect(EngineMachine.Settings(byID, DownloadConfiguration(), mirrors: []).ruleFileName == "lesson-7.iso")
        #expect(EngineMachine.Settings(DownloadRequest(url: Self.url, destination: .file("/d/x")), DownloadConfiguration(), mirrors: []).ruleFileName == nil)
        for rule: FileNamingRule in [.md5OfURL, .fromResponse] {
            settings.destination = .directory("/d", naming: rule)
            settings.ruleFileName = "given.bin"
            var machine = EngineMachine(url: try HTTPURL("http://origin.test/"), settings: settings)
            _ = machine.start()
            let head = ResponseHead(version: .http1_1, status: 200, reason: "", headers: DKHTTPHeaders([("Content-Length", "10")]))
            _ = machine.responseHead(head, wallClock: 0)
            #expect(machine.resource.fileName == "given.bin")
        }
    }

    /// A machine for a download of `Self.url` into `/d`.
    static func machine(_ configuration: DownloadConfiguration = DownloadConfiguration()) throws -> EngineMachine {
        EngineMachine(
            url: try HTTPURL(Self.url),
            settings: .init(DownloadRequest(url: Self.url, destination: .file("/d")), configuration, mirrors: []))
    }

    /// How an answer to a head says to write the body; nil when it says not to.
    static func bodyWrite(_ decision: EngineMachine.Decision<EngineMachine.HeadAction>) -> EngineMachine.BodyWrite? {
        if case .write(let plan) = decision.next { plan } else { nil }
    }
}

extension DownloadStateMachine where Failure == DownloadError {
    /// A head as the engine hands it to the machine: with the name it suggests, from the one function that
    /// computes it (`FileNaming.suggestedFileName(for:at:)`) and the URL the request went to.
    mutating func responseHead(_ head: ResponseHead, wallClock: Int64) -> Decision<HeadAction> {
        responseHead(head, suggestedFileName: FileNaming.suggestedFileName(for: head, at: currentURL), wallClock: wallClock)
    }
}
