import HTTPWire
import Testing

@testable import DownloadKitDecisions

/// An existing destination and the conditional first request, as a table: the policy and what the file
/// system says in, the verdict out.
@Suite struct ExistingFileRuleTests {
    struct Row: Sendable, CustomTestStringConvertible {
        var name: String
        var policy: ExistingFileRule.Policy
        var regular = true
        var partial = false
        var ours = true
        var verdict: ExistingFileRule.Verdict
        var testDescription: String { name }
    }

    static let rows: [Row] = [
        Row(name: "replace downloads whatever is there", policy: .replace, verdict: .download),
        Row(name: "no-clobber keeps a file", policy: .keep, verdict: .keep),
        Row(name: "no-clobber keeps another user's file too (nothing is reported as downloaded)", policy: .keep,
            ours: false, verdict: .keep),
        Row(name: "if-modified asks first about our file", policy: .keepIfNotModified, verdict: .askFirst),
        Row(name: "if-modified downloads another user's file again", policy: .keepIfNotModified, ours: false,
            verdict: .download),
        Row(name: "partial data beside it: the engine resumes", policy: .keepIfNotModified, partial: true, verdict: .download),
        Row(name: "partial data beside it wins over no-clobber", policy: .keep, partial: true, verdict: .download),
        Row(name: "a destination that is no regular file is downloaded", policy: .keep, regular: false, verdict: .download),
    ]

    @Test(arguments: rows)
    func verdict(_ row: Row) {
        let facts = ExistingFileRule.Facts(isRegularFile: row.regular, partialExists: row.partial, ownedByUs: row.ours)
        #expect(ExistingFileRule.verdict(row.policy, facts) == row.verdict)
    }

    @Test func theConditionsNameTheRecordedValidatorsElseTheMtime() {
        let recorded = ExistingFileRule.conditions(
            entityTag: "\"v1\"", lastModified: "Mon, 01 Jan 2024 00:00:00 GMT", modifiedSeconds: 0)
        #expect(recorded.first(name: "If-None-Match") == "\"v1\"")
        #expect(recorded.first(name: "If-Modified-Since") == "Mon, 01 Jan 2024 00:00:00 GMT")
        let bare = ExistingFileRule.conditions(entityTag: nil, lastModified: nil, modifiedSeconds: 1_704_067_200)
        #expect(!bare.contains(name: "If-None-Match"))
        #expect(bare.first(name: "If-Modified-Since") == "Mon, 01 Jan 2024 00:00:00 GMT")
    }
}
