/** The version of the layer contract this build of @metrale/core implements. */
export const SPECIFICATION_VERSION = '1.0.0';
