import { rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FixtureError, LAYER_FIXTURE_FORMAT, readLayerFixture, tensorOf } from '../src/index.js';
import { affineScenario, removeTempDirs, scenarioFiles, tempDir, writeFixture, type FixtureFiles } from './fixture-support/write-fixture.js';

afterAll(removeTempDirs);

/** A fresh copy of a good fixture's files (3 sequences; step 2 is a verify with k = 4). */
function goodFiles(options: { tokens?: boolean } = {}): FixtureFiles {
  return structuredClone(scenarioFiles(affineScenario(options.tokens ? { tokenScale: 0.5 } : {})));
}

function stepsOf(files: FixtureFiles): Record<string, unknown>[] {
  return files.caseJson.steps as Record<string, unknown>[];
}

function replaceTensor(files: FixtureFiles, name: string, make: (old: ReturnType<typeof tensorOf>) => ReturnType<typeof tensorOf>): void {
  files.tensors = files.tensors.map((t) => (t.name === name ? make(t) : t));
}

/** Writes the fixture, reads it, and returns the FixtureError it must throw. */
function readError(files: FixtureFiles, after?: (dir: string) => void): FixtureError {
  const dir = writeFixture(tempDir('bad'), files);
  after?.(dir);
  try {
    readLayerFixture(dir);
  } catch (error) {
    expect(error).toBeInstanceOf(FixtureError);
    const e = error as FixtureError;
    expect(e.message.startsWith(`${e.file}: `)).toBe(true);
    return e;
  }
  throw new Error('readLayerFixture accepted a bad fixture');
}

describe('readLayerFixture: a good fixture', () => {
  it('reads every field, the tensors and the extras', () => {
    const files = goodFiles({ tokens: true });
    files.caseJson.min_topk_gap = 3.5e-4;
    files.caseJson.writer = { torch: '2.9.0', seed: 1234 };
    const dir = writeFixture(tempDir('good'), files);
    const f = readLayerFixture(dir);
    expect(f.format).toBe(LAYER_FIXTURE_FORMAT);
    expect(f).toMatchObject({
      dir, family: 'affine', modelType: 'test_model', hfModule: 'TestModule', layerIndex: 0, weightsPrefix: 'model.layers.0.test.', sequences: 3,
      tolerance: { rel: 1e-5 }, minTopkGap: 3.5e-4, inputWidth: 6, outputWidth: 5,
    });
    expect(f.extra).toEqual({ writer: { torch: '2.9.0', seed: 1234 } });
    expect(f.caseJson.min_topk_gap).toBe(3.5e-4);
    expect(f.config.hidden_size).toBe(6);
    expect(f.weights.names()).toEqual(['weight', 'bias']);
    expect(f.files.case).toBe(join(dir, 'case.json'));
    expect(f.steps.map((s) => [s.op, s.rows])).toEqual([
      ['prefill', 15], ['decode', 3], ['verify', 12], ['decode', 2], ['verify', 6], ['decode', 3], ['prefill', 3], ['decode', 3],
    ]);
    expect(f.steps[2]).toMatchObject({ k: 4, accepted: [0, 4, 2], seqs: [0, 1, 2] });
    expect(f.steps[0]!.lengths).toEqual([5, 9, 1]);
    expect(f.steps[0]!.input.length).toBe(15 * 6);
    expect(f.steps[0]!.expected.length).toBe(15 * 5);
    expect(f.steps[0]!.tokens?.length).toBe(15);
  });

  it("finds a step's tokens beside its input when case.json does not name them", () => {
    const files = goodFiles({ tokens: true });
    for (const s of stepsOf(files)) delete s.tokens;
    const dir = writeFixture(tempDir('implicit'), files);
    const f = readLayerFixture(dir);
    expect(f.steps.every((s) => s.tokens?.length === s.rows)).toBe(true);
    expect(f.steps[1]!.tensorNames.tokens).toBe('step1.tokens');
  });

  it('accepts positions that follow the history, rejected verify rows excluded', () => {
    const files = goodFiles();
    // Sequence lengths before step 3 (decode of seqs 2, 0): 5+1+0 = 6 for seq 0, 1+1+2 = 4 for seq 2.
    files.tensors.push(tensorOf('step3.positions', new Int32Array([4, 6]), [2]));
    stepsOf(files)[3]!.positions = 'step3.positions';
    const dir = writeFixture(tempDir('positions'), files);
    expect(Array.from(readLayerFixture(dir).steps[3]!.positions!)).toEqual([4, 6]);
  });
});

describe('readLayerFixture: every bad input is a FixtureError naming the file and the field', () => {
  it.each(['case.json', 'config.json', 'weights.safetensors', 'case.safetensors'])('missing %s', (name) => {
    const e = readError(goodFiles(), (dir) => rmSync(join(dir, name)));
    expect(basename(e.file)).toBe(name);
    expect(e.message).toMatch(/missing file/);
  });

  it('a directory that does not exist', () => {
    expect(() => readLayerFixture('/nonexistent/fixture')).toThrow(/\/nonexistent\/fixture: fixture directory not found/);
  });

  it.each(['case.json', 'config.json'])('invalid JSON in %s', (name) => {
    const e = readError(goodFiles(), (dir) => writeFileSync(join(dir, name), '{"format": '));
    expect(basename(e.file)).toBe(name);
    expect(e.message).toMatch(/invalid JSON/);
  });

  it('config.json that is not an object', () => {
    const e = readError(goodFiles(), (dir) => writeFileSync(join(dir, 'config.json'), '[1, 2]'));
    expect(basename(e.file)).toBe('config.json');
    expect(e.message).toMatch(/expected a JSON object at the top level, got an array/);
  });

  it.each(['case.safetensors', 'weights.safetensors'])('a corrupt safetensors header in %s', (name) => {
    const e = readError(goodFiles(), (dir) => {
      const bytes = new Uint8Array(64);
      new DataView(bytes.buffer).setBigUint64(0, 40n, true);
      bytes.set(new TextEncoder().encode('{"x": {"dtype": "F32", "sh'), 8);
      writeFileSync(join(dir, name), bytes);
    });
    expect(basename(e.file)).toBe(name);
    expect(e.message).toMatch(/corrupt safetensors header/);
    expect(e.message.split(e.file).length).toBe(2); // the path once, not twice
  });

  type Case = [string, (f: FixtureFiles) => void, RegExp];
  const caseJsonCases: Case[] = [
    ['wrong format', (f) => (f.caseJson.format = 'metrale-layer-fixture/2'), /field 'format' is "metrale-layer-fixture\/2"; this reader understands only "metrale-layer-fixture\/1"/],
    ['missing family', (f) => delete f.caseJson.family, /missing field 'family'/],
    ['missing steps', (f) => delete f.caseJson.steps, /missing field 'steps'/],
    ['empty steps', (f) => (f.caseJson.steps = []), /field 'steps' must be a non-empty array/],
    ['layer_index not an integer', (f) => (f.caseJson.layer_index = 1.5), /field 'layer_index' must be an integer ≥ 0, got number 1.5/],
    ['sequences 0', (f) => (f.caseJson.sequences = 0), /field 'sequences' must be an integer ≥ 1/],
    ['missing tolerance', (f) => delete f.caseJson.tolerance, /missing field 'tolerance'/],
    ['tolerance.rel negative', (f) => (f.caseJson.tolerance = { rel: -1 }), /field 'tolerance.rel' must be a positive number/],
    ['min_topk_gap not a number', (f) => (f.caseJson.min_topk_gap = 'small'), /field 'min_topk_gap' must be a non-negative number/],
    ['an op other than prefill/decode/verify', (f) => (stepsOf(f)[1]!.op = 'sample'), /steps\[1\]\.op is string "sample"; a step is one of "prefill", "decode", "verify"/],
    ['an unknown step field', (f) => (stepsOf(f)[1]!.tokenz = 'step1.tokens'), /steps\[1\]: unknown field 'tokenz' for a decode step/],
    ['lengths on a decode step', (f) => (stepsOf(f)[1]!.lengths = [1, 1, 1]), /steps\[1\]: unknown field 'lengths' for a decode step/],
    ['a missing step field', (f) => delete stepsOf(f)[0]!.output, /steps\[0\]: missing field 'output'/],
    ['seqs outside sequences', (f) => (stepsOf(f)[1]!.seqs = [0, 1, 3]), /steps\[1\]\.seqs\[2\] is 3, outside the 3 sequences \(0\.\.2\)/],
    ['a negative seq', (f) => (stepsOf(f)[1]!.seqs = [0, -1, 2]), /steps\[1\]\.seqs\[1\] is -1, outside the 3 sequences/],
    ['a sequence listed twice', (f) => (stepsOf(f)[1]!.seqs = [0, 1, 1]), /steps\[1\]\.seqs lists sequence 1 twice/],
    ['lengths of the wrong count', (f) => (stepsOf(f)[0]!.lengths = [5, 9]), /steps\[0\]\.lengths has 2 entries for 3 sequences/],
    ['a zero length', (f) => (stepsOf(f)[0]!.lengths = [5, 0, 10]), /steps\[0\]\.lengths\[1\] is 0; a prefill gives each sequence at least 1 row/],
    ['a fractional length', (f) => (stepsOf(f)[0]!.lengths = [5, 8.5, 1]), /steps\[0\]\.lengths\[1\] must be an integer/],
    ['accepted of the wrong count', (f) => (stepsOf(f)[2]!.accepted = [0, 4]), /steps\[2\]\.accepted has 2 entries for 3 sequences/],
    ['accepted above k', (f) => (stepsOf(f)[2]!.accepted = [0, 5, 2]), /steps\[2\]\.accepted\[1\] is 5, outside 0\.\.k \(k = 4\)/],
    ['accepted below 0', (f) => (stepsOf(f)[2]!.accepted = [-1, 4, 2]), /steps\[2\]\.accepted\[0\] is -1, outside 0\.\.k/],
    ['verify without k', (f) => delete stepsOf(f)[2]!.k, /steps\[2\]: missing field 'k'/],
    ['verify with k = 0', (f) => (stepsOf(f)[2]!.k = 0), /field 'steps\[2\]\.k' must be an integer ≥ 1/],
  ];
  it.each(caseJsonCases)('case.json: %s', (_name, mutate, message) => {
    const files = goodFiles();
    mutate(files);
    const e = readError(files);
    expect(basename(e.file)).toBe('case.json');
    expect(e.message).toMatch(message);
  });

  const tensorCases: Case[] = [
    ['a tensor named by a step is missing', (f) => (f.tensors = f.tensors.filter((t) => t.name !== 'step1.input')), /tensor 'step1.input' named by steps\[1\]\.input is missing/],
    ['a step names a tensor that is not there', (f) => (stepsOf(f)[4]!.output = 'step4.out'), /tensor 'step4.out' named by steps\[4\]\.output is missing/],
    [
      'input rows disagree with prefill lengths',
      (f) => replaceTensor(f, 'step0.input', (t) => tensorOf(t.name, new Float32Array(14 * 6), [14, 6])),
      /tensor 'step0.input' \(input of steps\[0\], prefill of 3 sequence\(s\), 15 rows\) has 14 rows, shape \[14, 6\]; expected 15 rows/,
    ],
    [
      'output rows disagree with verify k',
      (f) => replaceTensor(f, 'step2.output', (t) => tensorOf(t.name, new Float32Array(9 * 5), [9, 5])),
      /tensor 'step2.output' \(output of steps\[2\], verify of 3 sequence\(s\), 12 rows\) has 9 rows.*expected 12 rows/,
    ],
    [
      'a decode step with a row per sequence missing',
      (f) => replaceTensor(f, 'step3.input', (t) => tensorOf(t.name, new Float32Array(6), [1, 6])),
      /tensor 'step3.input' \(input of steps\[3\], decode of 2 sequence\(s\), 2 rows\) has 1 rows/,
    ],
    [
      'an input width that disagrees with earlier steps',
      (f) => replaceTensor(f, 'step1.input', (t) => tensorOf(t.name, new Float32Array(3 * 7), [3, 7])),
      /tensor 'step1.input' \(input of steps\[1\], .*\) is 7 wide, but earlier steps' input rows are 6 wide/,
    ],
    [
      'an output width that disagrees with earlier steps',
      (f) => replaceTensor(f, 'step5.output', (t) => tensorOf(t.name, new Float32Array(3 * 4), [3, 4])),
      /tensor 'step5.output' \(output of steps\[5\].*\) is 4 wide, but earlier steps' output rows are 5 wide/,
    ],
    ['rows that are not 2-D', (f) => replaceTensor(f, 'step1.input', (t) => tensorOf(t.name, new Float32Array(18), [18])), /tensor 'step1.input' .* has shape \[18\]; expected \[rows, width\]/],
    ['integer rows', (f) => replaceTensor(f, 'step1.input', (t) => tensorOf(t.name, new Int32Array(18), [3, 6])), /tensor 'step1.input' \(steps\[1\]\.input\) is i32; rows must be floating point/],
    [
      'a non-finite expected value',
      (f) => replaceTensor(f, 'step1.output', (t) => tensorOf(t.name, new Float32Array(15).fill(Number.NaN), [3, 5])),
      /tensor 'step1.output' \(steps\[1\]\.output\) holds NaN at row 0, column 0/,
    ],
  ];
  it.each(tensorCases)('case.safetensors: %s', (_name, mutate, message) => {
    const files = goodFiles();
    mutate(files);
    const e = readError(files);
    expect(basename(e.file)).toBe('case.safetensors');
    expect(e.message).toMatch(message);
  });

  it('case.safetensors: tokens that are not integers', () => {
    const files = goodFiles({ tokens: true });
    replaceTensor(files, 'step1.tokens', (t) => tensorOf(t.name, new Float32Array(3), [3]));
    const e = readError(files);
    expect(basename(e.file)).toBe('case.safetensors');
    expect(e.message).toMatch(/tensor 'step1.tokens' \(token ids of steps\[1\].*\) is f32; token ids must be int32/);
  });

  it('case.safetensors: tokens of the wrong count', () => {
    const files = goodFiles({ tokens: true });
    replaceTensor(files, 'step2.tokens', (t) => tensorOf(t.name, new Int32Array(11), [11]));
    const e = readError(files);
    expect(e.message).toMatch(/tensor 'step2.tokens' \(token ids of steps\[2\], verify of 3 sequence\(s\), 12 rows\) has shape \[11\]; expected \[12\], one per row/);
  });

  it('case.safetensors: positions that ignore rejected verify rows', () => {
    const files = goodFiles();
    files.tensors.push(tensorOf('step3.positions', new Int32Array([6, 6]), [2]));
    stepsOf(files)[3]!.positions = 'step3.positions';
    const e = readError(files);
    expect(e.message).toMatch(/tensor 'step3.positions' \(positions of steps\[3\]\) has 6 at row 0, but sequence 2's history puts that row at position 4/);
  });
});
