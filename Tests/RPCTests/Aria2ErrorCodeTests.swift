import Foundation
import Glibc
import Testing

@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitManager
@testable import DownloadKitRPC

/// aria2's `errorCode` decided from a task error's typed fields (issue #46): never from its message.
@Suite("RPC: aria2 error codes from typed fields")
struct Aria2ErrorCodeTests {
    typealias Cause = ManagedTaskError.Cause

    /// One row per mapping: the task error's fields, then aria2's code. Every message is "…": the mapping
    /// cannot read it.
    @Test func eachTypedErrorMapsToItsAria2Code() {
        func error(
            _ code: DownloadError.Code, _ category: DownloadError.Category, status: Int? = nil, cause: Cause? = nil
        ) -> ManagedTaskError {
            ManagedTaskError(code: code, category: category, httpStatus: status, cause: cause, message: "…")
        }
        let rows: [(ManagedTaskError?, String)] = [
            (nil, "0"),
            (error(.httpStatus, .httpStatus, status: 404), "3"),
            (error(.httpStatus, .httpStatus, status: 410), "3"),
            (error(.httpStatus, .httpStatus, status: 401), "24"),
            (error(.httpStatus, .httpStatus, status: 407), "24"),
            (error(.httpStatus, .httpStatus, status: 503), "29"),
            (error(.httpStatus, .httpStatus, status: 500), "22"),
            (error(.httpStatus, .httpStatus), "22"),
            (error(.transport, .network, cause: Cause(layer: .transport, code: "connectTimeout")), "2"),
            (error(.transport, .network, cause: Cause(layer: .transport, code: "readTimeout")), "2"),
            (error(.transport, .network, cause: Cause(layer: .transport, code: "resolveFailed")), "19"),
            (error(.transport, .network, cause: Cause(layer: .transport, code: "connectionReset")), "6"),
            (error(.transport, .network), "6"),
            (error(.transport, .tls, cause: Cause(layer: .transport, code: "certificateExpired")), "6"),
            (error(.truncated, .network, cause: Cause(layer: .wire, code: "truncatedBody")), "6"),
            (error(.tooSlow, .network), "5"),
            (error(.tooManyRedirects, .redirect), "23"),
            (error(.redirectLoop, .redirect), "1"),
            (error(.checksumMismatch, .integrity), "32"),
            (error(.contentMD5Mismatch, .integrity), "32"),
            (error(.protocolViolation, .protocolViolation), "22"),
            (error(.serverIgnoredRange, .protocolViolation), "8"),
            (error(.diskFull, .space), "9"),
            (error(.insufficientSpace, .space), "9"),
            (error(.fileSystem, .fileSystem, cause: Cause(layer: .fileSystem, errorNumber: .fileExists, operation: "link")), "13"),
            (error(.fileSystem, .fileSystem, cause: Cause(layer: .fileSystem, errorNumber: .permissionDenied, operation: "mkdir")), "18"),
            (error(.fileSystem, .fileSystem, cause: Cause(layer: .fileSystem, errorNumber: .permissionDenied, operation: "open")), "16"),
            (error(.fileSystem, .fileSystem, cause: Cause(layer: .fileSystem, errorNumber: .ioError, operation: "pwrite")), "17"),
            (error(.fileSystem, .fileSystem, cause: Cause(layer: .fileSystem, errorNumber: .ioError, operation: "rename")), "15"),
            (error(.fileSystem, .fileSystem), "15"),
            (error(.destinationInUse, .inUse), "11"),
            (error(.invalidURL, .other), "1"),
            (error(.cancelled, .stopped), "1"),
        ]
        for (taskError, expected) in rows {
            #expect(Aria2Status.errorCode(taskError) == expected, "\(String(describing: taskError))")
        }
    }

    /// An HTTP 404 and a 410 are aria2's "resource not found" (3) from the status field alone: the
    /// messages here do not contain "404" (the rule before read `message.contains("404")`, which gave 22
    /// to both and 3 to any message that happened to hold "404").
    @Test func a404AndA410AreResourceNotFoundWithoutReadingTheMessage() throws {
        let url = "http://127.0.0.1:1/a.bin"
        for status in [404, 410] {
            let download = DownloadError(.httpStatus, "the server said no to \(url)", httpStatus: status)
            let taskError = ManagedTaskError(download)
            #expect(!taskError.message.contains("404"))
            #expect(Aria2Status.errorCode(taskError) == "3", "\(status)")
        }
        let misleading = ManagedTaskError(
            code: .httpStatus, category: .httpStatus, httpStatus: 500, message: "HTTP status 500 for /404.html")
        #expect(Aria2Status.errorCode(misleading) == "22")
    }

    /// A failed task's status object carries the code from its typed error; a removed one 31.
    @Test func aStoppedTaskReportsTheTypedCode() {
        let now = Date()
        var task = ManagedTask(
            id: "00000000-0000-4000-8000-000000000001", originalURL: "http://x/a", currentURL: "http://x/a", fileID: nil,
            destination: .file("/tmp/a"), path: "/tmp/a", state: .failed, bytesReceived: 0, totalBytes: nil,
            priority: .normal, queueOrder: 1, group: nil, checksum: nil, headers: [:], metadata: [:],
            requiresUnmeteredNetwork: false, rateLimit: nil,
            error: ManagedTaskError(code: .httpStatus, category: .httpStatus, httpStatus: 410, message: "Gone"),
            createdAt: now, updatedAt: now, finishedAt: now)
        #expect(Aria2Status.errorCode(of: task) == "3")
        task.state = .cancelled
        #expect(Aria2Status.errorCode(of: task) == "31")
    }
}
