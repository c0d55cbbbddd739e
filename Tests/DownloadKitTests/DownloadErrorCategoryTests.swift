import Foundation
import HTTPClient
import HTTPWire
import Testing

@testable import DownloadKit

/// Typed causes end to end (issue #12): a ``DownloadError`` keeps the value it came from, and one
/// classification (``DownloadError/Category``) decides what kind of failure it is.
struct DownloadErrorCategoryTests {
    @Test func outOfSpaceWhileWritingTheResumeInfoIsDiskFullNotAFileSystemError() {
        let write = ResumeInfoError(.ioFailed, errorNumber: .noSpace, "write /d/f.dkresume.tmp failed")
        let error = DownloadError.wrap(write)
        #expect(error.code == .diskFull)
        #expect(error.category == .space)
        #expect(error.cause == .resumeInfo(write))
    }

    @Test func quotaExceededIsDiskFullToo() {
        let error = DownloadError.wrap(FileSystemError("write", path: "/d/f.dkpart", errorNumber: .quotaExceeded))
        #expect(error.code == .diskFull)
    }

    @Test func aResumeRecordThatDoesNotDecodeIsInvalidResumeData() {
        let decode = ResumeInfoError(.notAPropertyList, "not a property list")
        let error = DownloadError.wrap(decode)
        #expect(error.code == .invalidResumeData)
        #expect(error.cause == .resumeInfo(decode))
    }

    @Test func transportErrorsKeepTheirValueAndTLSCodesAreTLS() {
        let expired = TransportError(.certificateExpired, detail: "expired")
        #expect(DownloadError.wrap(expired).cause == .transport(expired))
        #expect(DownloadError.wrap(expired).category == .tls)
        #expect(DownloadError.wrap(TransportError(.publicKeyPinMismatch, detail: "pin")).category == .tls)
        #expect(DownloadError.wrap(TransportError(.connectionReset, detail: "reset")).category == .network)
        #expect(DownloadError.wrap(TransportError(.readTimeout, detail: "slow")).category == .network)
    }

    @Test func aBodyCutShortIsATransientNetworkFailureWithItsWireError() {
        let cut = WireError(.truncatedBody, "the body ended early")
        let error = DownloadError.wrap(cut)
        #expect(error.code == .truncated)
        #expect(error.isTransient)
        #expect(error.category == .network)
        #expect(error.cause == .wire(cut))
    }

    @Test func anUnknownErrorTypeIsAnInternalErrorNotAFileSystemError() {
        struct Surprise: Error {}
        let error = DownloadError.wrap(Surprise())
        #expect(error.code == .internalError)
        #expect(error.category == .other)
        #expect(error.detail.contains("Surprise"))
    }

    @Test func cancellationIsStopped() {
        #expect(DownloadError.wrap(CancellationError()).category == .stopped)
        #expect(DownloadError.wrap(TransportError(.cancelled, detail: "")).category == .stopped)
    }
}
