// lint_openapi.mjs - Redocly's lint of an OpenAPI document: its structure
// against OpenAPI 3.0 (nullable beside a type, no stray members), $refs,
// and the "recommended" rules.  Any error or warning fails.
//
// usage: node tests/api/lint_openapi.mjs server/openapi.yaml
// Prints one "ok - ..." or "not ok - ..." line (tests/run.sh counts them)
// and, on failure, one "#" line per problem.
import { createConfig, lint } from '@redocly/openapi-core';

// Rules of "recommended" that this document does not follow, and why.
const RULES_OFF = {
    // shoal has not chosen a licence; the document should not invent one.
    'info-license': 'off',
    // The probes and the dashboard's files answer nothing but 200 of their
    // own: an unknown path's 404 and another method's 405 come from the
    // router, for every path, and are described in info.description.
    'operation-4xx-response': 'off',
};

const path = process.argv[2];
if (!path) {
    console.error('usage: lint_openapi.mjs OPENAPI.yaml');
    process.exit(2);
}
const name = `api: Redocly lints ${path} clean (recommended rules, OpenAPI 3.0 structure)`;
let problems;
try {
    const config = await createConfig({ extends: ['recommended'], rules: RULES_OFF });
    problems = await lint({ ref: path, config });
} catch (e) {
    console.log(`not ok - ${name}: ${e.message}`);
    process.exit(1);
}
if (problems.length === 0) {
    console.log(`ok - ${name}`);
} else {
    const errors = problems.filter((p) => p.severity === 'error').length;
    console.log(`not ok - ${name}: ${errors} errors, ${problems.length - errors} warnings`);
    for (const p of problems) {
        const at = p.location?.[0]?.pointer ?? '';
        console.log(`#   ${p.severity} ${p.ruleId} at ${at}: ${p.message}`);
    }
}
process.exit(problems.length === 0 ? 0 : 1);
